-- Async suspend: the checkpoint is kept on the node (a LOCAL snapshot) and uploaded in the
-- background. Until the upload lands, `pending_upload_snapshot_id` points at the local copy and
-- `pinned_node` names its node: a resume in the meantime restores it there. (A PAUSED actor's
-- local snapshot is `local_snapshot_id`; the two are kept apart so that a failed resume returns
-- each actor to the state it came from.)
ALTER TABLE actors ADD COLUMN pending_upload_snapshot_id bigint REFERENCES snapshots (id);
