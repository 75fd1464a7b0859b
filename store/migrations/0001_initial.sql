-- Initial schema: atespaces, actor templates, nodes, workers, placements, snapshots, actors.
-- Hot-path lookups are by primary key or by an index; nothing on a resume scans actors.

CREATE TABLE atespaces (
    name        text PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE actor_templates (
    atespace            text NOT NULL REFERENCES atespaces (name),
    name                text NOT NULL,
    spec                jsonb NOT NULL,
    phase               text NOT NULL DEFAULT 'Pending',      -- Pending | Ready | Failed
    reason              text,
    golden_snapshot_id  bigint,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (atespace, name)
);

CREATE TABLE nodes (
    name            text PRIMARY KEY,
    address         text NOT NULL,                 -- atelet gRPC host:port
    runsc_version   text NOT NULL DEFAULT '',
    last_heartbeat  timestamptz NOT NULL DEFAULT now(),
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE workers (
    id              bigserial PRIMARY KEY,
    node            text NOT NULL REFERENCES nodes (name),
    name            text NOT NULL,
    pool            text NOT NULL,
    ip              text NOT NULL,
    sandbox_class   text NOT NULL,
    labels          jsonb NOT NULL DEFAULT '{}',
    state           text NOT NULL DEFAULT 'ACTIVE',   -- ACTIVE | UNAVAILABLE
    places          integer NOT NULL CHECK (places > 0),
    cpu_millis      bigint NOT NULL CHECK (cpu_millis > 0),
    memory_bytes    bigint NOT NULL CHECK (memory_bytes > 0),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (node, name)
);

-- One row per holder of a place on a worker. The holder is the owner key of the operation
-- that bound it: 'actor/<atespace>/<name>' or 'template/<atespace>/<name>' (golden boot).
CREATE TABLE placements (
    holder        text PRIMARY KEY,
    worker_id     bigint NOT NULL REFERENCES workers (id),
    operation_id  text NOT NULL,
    cpu_millis    bigint NOT NULL,
    memory_bytes  bigint NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX placements_worker_idx ON placements (worker_id);

CREATE TABLE snapshots (
    id            bigserial PRIMARY KEY,
    owner         text NOT NULL,                 -- 'actor/<atespace>/<name>' or 'template/<atespace>/<name>'
    generation    integer NOT NULL,
    scope         text NOT NULL,                 -- FULL | DATA
    storage       text NOT NULL DEFAULT 'EXTERNAL',  -- LOCAL | EXTERNAL
    state         text NOT NULL DEFAULT 'PENDING',   -- PENDING | COMPLETED
    uri           text NOT NULL,
    node          text,
    sandbox_class text NOT NULL,
    manifest      jsonb,
    size_bytes    bigint,
    operation_id  text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    completed_at  timestamptz,
    UNIQUE (owner, generation)
);

CREATE TABLE actors (
    atespace                 text NOT NULL REFERENCES atespaces (name),
    name                     text NOT NULL,
    template                 text NOT NULL,
    state                    text NOT NULL DEFAULT 'SUSPENDED',
    version                  bigint NOT NULL DEFAULT 1,
    worker_selector          jsonb NOT NULL DEFAULT '{}',
    worker_id                bigint REFERENCES workers (id),
    latest_snapshot_id       bigint REFERENCES snapshots (id),
    in_progress_snapshot_id  bigint REFERENCES snapshots (id),
    pinned_node              text,
    operation                text,               -- the operation that holds the transitional state
    operation_id             text,
    last_error               text,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (atespace, name),
    FOREIGN KEY (atespace, template) REFERENCES actor_templates (atespace, name)
);
CREATE INDEX actors_template_idx ON actors (atespace, template);
CREATE INDEX actors_worker_idx ON actors (worker_id) WHERE worker_id IS NOT NULL;

-- Routers keep a cache of RUNNING actors; every state change of an actor is announced so that
-- no router proxies to a worker its actor has left.
CREATE FUNCTION ate_notify_actor_change() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('ate_actor_changes', OLD.atespace || '/' || OLD.name || ' DELETED');
        RETURN OLD;
    END IF;
    IF TG_OP = 'INSERT' OR NEW.state IS DISTINCT FROM OLD.state OR NEW.worker_id IS DISTINCT FROM OLD.worker_id THEN
        PERFORM pg_notify('ate_actor_changes', NEW.atespace || '/' || NEW.name || ' ' || NEW.state);
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER actors_notify AFTER INSERT OR UPDATE OR DELETE ON actors
    FOR EACH ROW EXECUTE FUNCTION ate_notify_actor_change();

CREATE FUNCTION ate_notify_worker_change() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('ate_worker_changes', COALESCE(NEW.id, OLD.id)::text);
    RETURN COALESCE(NEW, OLD);
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER workers_notify AFTER INSERT OR UPDATE OR DELETE ON workers
    FOR EACH ROW EXECUTE FUNCTION ate_notify_worker_change();
