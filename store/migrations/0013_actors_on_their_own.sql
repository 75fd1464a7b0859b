-- Actors that leave their worker and wake by themselves (issue 27).
--
-- last_active_at: the last time any router replica reported traffic for the actor (a request in
-- flight, a byte moved; every replica reports in its heartbeat), or its last resume. The idle
-- judge compares it with the idle policy's steps; it is judged across every replica because
-- every replica writes it.
-- idle_policy: the actor's own idle policy (a list of {afterSeconds, action}); NULL: its
-- template's; an empty list: off for this actor.
-- running_since: when the actor last became RUNNING (a pressure suspend spares actors that have
-- run for less than their template's minimumRunSeconds).
-- unreachable_from: the resting state an UNREACHABLE actor left (RUNNING or FROZEN), the state
-- it goes back to when its node answers again.
-- resumed_from: FROZEN while a resume thaws the actor in place (a retry of that resume thaws
-- again instead of restoring a snapshot onto the worker that holds the frozen sandbox).
-- suspended_from: the resting state a SUSPENDING or PAUSING actor left (RUNNING or FROZEN), the
-- state a failed or abandoned checkpoint goes back to (a frozen sandbox is thawed only by the
-- checkpoint itself).
-- operations.reason: why ate started an operation by itself ('idle for 300 s', 'pressure: ...').
-- router_drains.if_idle / router_drain_acks.busy: an idle action's drain is abandoned by a
-- replica that has a request in flight for the actor (the request wins).
ALTER TABLE actors ADD COLUMN last_active_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE actors ADD COLUMN idle_policy jsonb;
ALTER TABLE actors ADD COLUMN running_since timestamptz;
ALTER TABLE actors ADD COLUMN unreachable_from text;
ALTER TABLE actors ADD COLUMN resumed_from text;
ALTER TABLE actors ADD COLUMN suspended_from text;
ALTER TABLE operations ADD COLUMN reason text;
ALTER TABLE router_drains ADD COLUMN if_idle boolean NOT NULL DEFAULT false;
ALTER TABLE router_drain_acks ADD COLUMN busy boolean NOT NULL DEFAULT false;
