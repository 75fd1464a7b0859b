-- PAUSED actors: a pause keeps its checkpoint on the node (a LOCAL snapshot). While an actor has
-- one, `local_snapshot_id` points at it and `pinned_node` names the node that holds it; the
-- actor's `latest_snapshot_id` stays its last snapshot in the storage location, which is what a
-- revert returns to and what a tag names.
ALTER TABLE actors ADD COLUMN local_snapshot_id bigint REFERENCES snapshots (id);

-- A drain uploads the paused actors of its node; a lookup by node, not a scan of actors.
CREATE INDEX actors_pinned_node_idx ON actors (pinned_node) WHERE pinned_node IS NOT NULL;
