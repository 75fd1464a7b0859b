-- A worker whose actor crashed is held out of placement until every live router replica drained
-- that actor (issue 13: after an actor leaves RUNNING no router may deliver a request to its old
-- worker, even once another actor is there). The crash records a router drain, as a suspend does
-- before its checkpoint, and points the worker at it; each heartbeat of the worker's node keeps
-- the worker UNAVAILABLE while a live replica has yet to acknowledge that drain and its bound
-- (the replica's drain timeout plus a margin) has not run out, then forgets it. A change of the
-- column is a change of the worker row, which announces itself already (0001).
ALTER TABLE workers ADD COLUMN router_drain_id bigint REFERENCES router_drains (id) ON DELETE SET NULL;
