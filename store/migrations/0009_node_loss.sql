-- Node loss: a silent node is lost, not dead (domain/liveness.py). The api-server's liveness
-- watcher sets `lost_at` when a node's lease runs out (its workers UNAVAILABLE) and a heartbeat
-- clears it; a node is alive for every process exactly when it is neither lost nor retired.
ALTER TABLE nodes ADD COLUMN lost_at timestamptz;

-- A RUNNING actor of a lost node is UNREACHABLE until `unreachable_until` (the grace): its worker
-- and place are kept; when its node answers again still running its sandbox it is RUNNING again,
-- past the grace it is CRASHED.
ALTER TABLE actors ADD COLUMN unreachable_until timestamptz;

-- The history of an actor (`ate describe actor`) records each time it spent UNREACHABLE as an
-- operation `NodeLost` (outcome `waiting` while it lasts); whatever takes the actor out of
-- UNREACHABLE closes that record with where it went and why (its last_error).
CREATE FUNCTION ate_close_node_loss() RETURNS trigger AS $$
BEGIN
    UPDATE operations
    SET outcome = CASE NEW.state WHEN 'RUNNING' THEN 'returned' WHEN 'CRASHED' THEN 'crashed'
                                 WHEN 'REVERTING' THEN 'reverted' ELSE lower(NEW.state) END,
        error = CASE WHEN NEW.state = 'CRASHED' THEN COALESCE(NEW.last_error, error) ELSE error END,
        finished_at = now()
    WHERE atespace = NEW.atespace AND actor = NEW.name AND operation = 'NodeLost' AND finished_at IS NULL;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER actors_close_node_loss AFTER UPDATE OF state ON actors
    FOR EACH ROW WHEN (OLD.state = 'UNREACHABLE' AND NEW.state IS DISTINCT FROM 'UNREACHABLE')
    EXECUTE FUNCTION ate_close_node_loss();

-- Automatic recovery (a template's `onCrash: Revert`) looks for the CRASHED actors of such
-- templates, template by template, without walking every actor.
CREATE INDEX actors_crashed_idx ON actors (atespace, template) WHERE state = 'CRASHED';
