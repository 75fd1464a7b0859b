-- Router replicas and the drains of an actor's traffic before its checkpoint (issue 13, "Drain
-- before checkpoint"). A replica registers and heartbeats through the API; SuspendActor and
-- PauseActor record a drain for the actor, NOTIFY `ate_router_drains` ("<id> <atespace>/<name>")
-- and wait until every live replica (heard from within its lease) acknowledged it.
CREATE TABLE router_replicas (
    name                  text PRIMARY KEY,
    started_at            timestamptz NOT NULL DEFAULT now(),
    last_seen_at          timestamptz NOT NULL DEFAULT now(),
    lease_seconds         double precision NOT NULL,
    drain_timeout_seconds double precision NOT NULL
);

CREATE TABLE router_drains (
    id            bigserial PRIMARY KEY,
    operation_id  text NOT NULL UNIQUE,
    atespace      text NOT NULL,
    name          text NOT NULL,
    requested_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX router_drains_by_time ON router_drains (requested_at);

CREATE TABLE router_drain_acks (
    drain_id  bigint NOT NULL REFERENCES router_drains (id) ON DELETE CASCADE,
    replica   text NOT NULL,
    acked_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (drain_id, replica)
);
