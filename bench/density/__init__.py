"""Benchmark 5: density. How many RUNNING and idle counter actors one machine holds.

Two stacks in one run, both with real runsc (not hollow):

1. Workers (a worker is a network namespace + veth pair): max(N, 100) worker networks made with
   `atelet.netns` without a stack (kernel Slab+Percpu and MemAvailable deltas); then a stack with
   2 workers and one with N (one per RUNNING actor, `--workers N`): MemAvailable drop from just
   before each start to just after `ate: ready`, and the atelet's RSS/PSS.
2. RUNNING (second stack): the counter template (`examples/counter/template.yaml`, FULL scope)
   and N + M actors; N of them resumed through the REST API (a few at a time) and sent one
   `GET /` through the router. Then per running sandbox the PSS (from
   `/proc/<pid>/smaps_rollup`: shared pages split fairly among the processes mapping them) and
   the RSS, summed over that sandbox's processes (the runsc sandbox with its stub children, the
   gofer: every process naming the sandbox's bundle, found from `runsc list`), separately the
   atelet's `runsc wait` watcher of that sandbox, and the memory cgroup's usage when runsc made
   one per sandbox. System view: the drop in MemAvailable per running actor (noisy on a shared
   machine). Control-plane processes' RSS and PSS at that point.
3. Baseline, same run, while ours run: one bare counter sandbox restored with `runsc restore`
   from the same golden checkpoint, no control plane (`bench.activation.prepare_floor`: own
   namespace, bundle, runsc root), sent one `GET /` too; its PSS/RSS the same way.
   Ratio ours-per-sandbox / bare.
4. CPU: CPU of every process over an idle window (nothing sent), then over a window of `GET /`
   through the router round-robin over the running actors (8 in flight).
5. IDLE: the N running actors suspended, the M others resumed and suspended (each gets its own
   FULL snapshot). Disk per idle actor: its snapshot directory (real bytes: allocated blocks)
   plus what the node keeps for it (atelet actor dir, sandbox log); Postgres bytes per actor
   (`pg_total_relation_size` of actors + snapshots + operations over the actor count);
   MemAvailable and the runsc process count back near where they were before the resumes.

Estimates derived from these figures are labelled as such in the output.

Where things live: `benchmark` runs the phases in order and `report` writes the text and the KEY
line. The phases measure with `memory` (/proc/meminfo, smaps_rollup), `sandboxes` (a runsc
root's sandboxes and their processes), `disk`, `networks` (worker networks) and `database` (the
stack's PostgreSQL); `workload` creates and drives the actors, `bare` is the baseline sandbox,
`stacks` reads the stacks' parts and stops them with a check that nothing is left.
"""

from bench.density.benchmark import run

__all__ = ["run"]
