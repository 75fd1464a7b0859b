-- Placement check 4 per worker (issue 15, the microvm sandbox class): a node may run a gVisor pool
-- and a microvm pool, whose runtimes differ (a runsc build; a QEMU version, machine type and
-- accelerator). Each worker keeps the runtime its atelet reports for it; placement reads
-- `COALESCE(NULLIF(w.runtime_version, ''), n.runsc_version)`, so a worker of an atelet that
-- reports none is judged by its node's runsc build, as before. A change of the column is a change
-- of the worker row, which announces itself already (0001).
ALTER TABLE workers ADD COLUMN runtime_version text NOT NULL DEFAULT '';
