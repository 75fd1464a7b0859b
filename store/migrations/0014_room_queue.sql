-- Resumes that found no worker with room are served in the order they came (issue 27: at two
-- requests in flight per worker, requests parked for room were passed by a dozen later ones and
-- ran out of their park budget, while the worker one resume's pressure move emptied went to
-- another resume, which then moved a third actor).
--
-- workers.reserved_for / reserved_until: the worker a pressure move is emptying is kept for one
-- resume (its holder, `actor/<atespace>/<name>`) until then: placement passes it by for anyone
-- else, and no other pressure move chooses the actor on it. The resume's bind clears it; a resume
-- that never comes leaves it to run out. A change of the columns is a change of the worker row,
-- which announces itself already (0001).
-- room_waiters: the resumes waiting for room, each from when it first found none (kept across
-- its callers' retries while it keeps trying) with what its placement asks (a
-- domain.placement.Demand) and the pool it would take; a pressure move keeps the worker it
-- empties for the oldest live waiter that worker would take. A waiter that stopped trying
-- (seen_at too old) counts no more; its bind removes it.
ALTER TABLE workers ADD COLUMN reserved_for text;
ALTER TABLE workers ADD COLUMN reserved_until timestamptz;
CREATE INDEX workers_reserved_for ON workers (reserved_for) WHERE reserved_for IS NOT NULL;

CREATE TABLE room_waiters (
    holder text PRIMARY KEY,
    operation_id text NOT NULL,
    since timestamptz NOT NULL,
    seen_at timestamptz NOT NULL,
    demand jsonb NOT NULL,
    pool text NOT NULL DEFAULT ''
);
CREATE INDEX room_waiters_since ON room_waiters (since);
