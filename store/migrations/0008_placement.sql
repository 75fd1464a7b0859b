-- Placement (ARCHITECTURE.md, "Placement"): check 4, one actor per worker, and the in-memory
-- worker view of the process that places.

-- Check 4: a FULL snapshot restores only under the runsc build that wrote it. The build is in the
-- manifest the atelet writes; the row keeps it as a column placement reads (NULL for DATA
-- snapshots, which restore anywhere, and for a manifest that does not say).
ALTER TABLE snapshots ADD COLUMN runsc_version text;
UPDATE snapshots SET runsc_version = NULLIF(manifest->>'runsc_version', '')
WHERE scope = 'FULL' AND manifest IS NOT NULL;

-- A worker is one sandbox with one address: it hosts one actor at a time. Registrations that
-- claim more are refused (api/schemas.py, store/nodes.py); the table says so too.
UPDATE workers SET places = 1 WHERE places <> 1;
ALTER TABLE workers DROP CONSTRAINT workers_places_check;
ALTER TABLE workers ADD CONSTRAINT workers_one_place CHECK (places = 1);

-- The worker view (store/worker_view.py) LISTENs on ate_worker_changes. A worker row
-- announces itself already (0001: its id); a change of its places announces its worker too (a new
-- place as 'place <worker id> <holder>', so the process that bound it knows its bind committed),
-- and a node whose runsc build changes announces 'node <name>' (its workers' check 4 changes with
-- it). Notifications go out at commit, so a listener never sees a change that is rolled back.
CREATE FUNCTION ate_notify_placement_change() RETURNS trigger AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        PERFORM pg_notify('ate_worker_changes', OLD.worker_id::text);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM pg_notify('ate_worker_changes', 'place ' || NEW.worker_id || ' ' || NEW.holder);
    END IF;
    RETURN COALESCE(NEW, OLD);
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER placements_notify AFTER INSERT OR UPDATE OR DELETE ON placements
    FOR EACH ROW EXECUTE FUNCTION ate_notify_placement_change();

CREATE FUNCTION ate_notify_node_change() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('ate_worker_changes', 'node ' || NEW.name);
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER nodes_notify AFTER UPDATE OF runsc_version ON nodes
    FOR EACH ROW WHEN (OLD.runsc_version IS DISTINCT FROM NEW.runsc_version)
    EXECUTE FUNCTION ate_notify_node_change();
