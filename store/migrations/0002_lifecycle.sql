-- Lifecycle: why a worker is unavailable (draining, node lost), tags, operation history,
-- and snapshots marked for garbage collection.

ALTER TABLE workers ADD COLUMN state_reason text;
ALTER TABLE nodes ADD COLUMN draining_until timestamptz;

-- A tag is a named pointer to a COMPLETED snapshot within an atespace.
CREATE TABLE tags (
    atespace     text NOT NULL REFERENCES atespaces (name),
    name         text NOT NULL,
    snapshot_id  bigint NOT NULL REFERENCES snapshots (id),
    source_actor text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (atespace, name)
);

-- Snapshots no actor, template or tag needs any more; the GC workflow deletes their data, then the row.
ALTER TABLE snapshots ADD COLUMN deleted_at timestamptz;
CREATE INDEX snapshots_owner_idx ON snapshots (owner, generation);

-- The last operations of each actor, for `ate describe actor`.
CREATE TABLE operations (
    operation_id  text PRIMARY KEY,
    atespace      text NOT NULL,
    actor         text NOT NULL,
    operation     text NOT NULL,
    outcome       text,                 -- NULL while running; ok | the failure's reason
    worker        text,
    error         text,
    started_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz
);
CREATE INDEX operations_actor_idx ON operations (atespace, actor, started_at DESC);

-- Actors no longer refer to snapshots through a foreign key that blocks GC of superseded
-- generations; references are checked by the GC query instead.
