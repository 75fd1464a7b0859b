-- create_atespace --
-- Create an atespace; returns nothing when the name is taken.
INSERT INTO atespaces (name) VALUES ($1)
ON CONFLICT DO NOTHING
RETURNING name, created_at;

-- get_atespace --
-- One atespace by name.
SELECT name, created_at FROM atespaces WHERE name = $1;

-- list_atespaces --
-- Every atespace, by name.
SELECT name, created_at FROM atespaces ORDER BY name;

-- atespace_usage --
-- How many actors and templates an atespace still holds.
SELECT (SELECT count(*) FROM actors WHERE atespace = $1) AS actors,
       (SELECT count(*) FROM actor_templates WHERE atespace = $1) AS templates;

-- delete_atespace --
-- Delete an empty atespace.
DELETE FROM atespaces a WHERE a.name = $1
  AND NOT EXISTS (SELECT 1 FROM actors WHERE atespace = $1)
  AND NOT EXISTS (SELECT 1 FROM actor_templates WHERE atespace = $1)
RETURNING name;

-- create_template --
-- Create an actor template in phase Pending; returns nothing when the name is taken.
INSERT INTO actor_templates (atespace, name, spec) VALUES ($1, $2, $3)
ON CONFLICT DO NOTHING
RETURNING atespace, name, spec, phase, reason, golden_snapshot_id, created_at;

-- get_template --
-- One actor template.
SELECT atespace, name, spec, phase, reason, golden_snapshot_id, created_at
FROM actor_templates WHERE atespace = $1 AND name = $2;

-- list_templates --
-- The templates of one atespace.
SELECT atespace, name, spec, phase, reason, golden_snapshot_id, created_at
FROM actor_templates WHERE atespace = $1 ORDER BY name;

-- set_template_phase --
-- Record the outcome of a template's GoldenSnapshot workflow.
UPDATE actor_templates
SET phase = $3, reason = $4, golden_snapshot_id = COALESCE($5, golden_snapshot_id), updated_at = now()
WHERE atespace = $1 AND name = $2
RETURNING name;

-- delete_template --
-- Delete a template no actor uses.
DELETE FROM actor_templates t WHERE t.atespace = $1 AND t.name = $2
  AND NOT EXISTS (SELECT 1 FROM actors a WHERE a.atespace = $1 AND a.template = $2)
RETURNING name;

-- template_in_use --
-- Whether any actor uses a template.
SELECT EXISTS (SELECT 1 FROM actors WHERE atespace = $1 AND template = $2);

-- create_actor --
-- Create an actor in SUSPENDED, with its own idle policy $5 and egress policy $6 (NULL: its
-- template's); returns nothing when the name is taken.
INSERT INTO actors (atespace, name, template, worker_selector, idle_policy, egress_policy)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT DO NOTHING
RETURNING atespace, name;

-- fork_actor --
-- A new actor $3 like actor $2 of atespace $1 (template, worker selector, idle and egress
-- policies), SUSPENDED on snapshot $4; returns nothing when the name is taken.
INSERT INTO actors (atespace, name, template, worker_selector, idle_policy, egress_policy, latest_snapshot_id)
SELECT atespace, $3, template, worker_selector, idle_policy, egress_policy, $4 FROM actors
WHERE atespace = $1 AND name = $2
ON CONFLICT DO NOTHING
RETURNING name;

-- get_actor --
-- One actor with its worker and its latest snapshot (primary-key lookup).
SELECT a.atespace, a.name, a.template, a.state, a.version, a.worker_selector, a.operation,
       a.operation_id, a.last_error, a.created_at, a.updated_at, a.resumed_from,
       w.id AS worker_id, w.pool AS worker_pool, w.name AS worker_name, w.node AS worker_node,
       w.ip AS worker_ip, n.address AS atelet_address,
       s.id AS snapshot_id, s.generation AS snapshot_generation, s.scope AS snapshot_scope,
       s.uri AS snapshot_uri, s.state AS snapshot_state, s.manifest AS snapshot_manifest,
       a.pinned_node, l.id AS local_snapshot_id, l.generation AS local_snapshot_generation,
       a.pending_upload_snapshot_id IS NOT NULL AS upload_pending,
       l.scope AS local_snapshot_scope, l.uri AS local_snapshot_uri,
       a.idle_policy, t.spec -> 'idle' AS template_idle, a.egress_policy,
       EXTRACT(EPOCH FROM now() - a.last_active_at)::float8 AS idle_seconds
FROM actors a
LEFT JOIN actor_templates t ON t.atespace = a.atespace AND t.name = a.template
LEFT JOIN workers w ON w.id = a.worker_id
LEFT JOIN nodes n ON n.name = w.node
LEFT JOIN snapshots s ON s.id = a.latest_snapshot_id
LEFT JOIN snapshots l ON l.id = COALESCE(a.local_snapshot_id, a.pending_upload_snapshot_id)
WHERE a.atespace = $1 AND a.name = $2;

-- list_actors --
-- One page of actors after the (atespace, name) key $2/$3, optionally in the atespaces $1 and
-- one state $5. The page is cut from the primary-key index first and joined afterwards, so a
-- deep page costs the same as the first (bench/scale.py measured 300 ms -> 1.6 ms at 10^6 rows).
WITH page AS (
    SELECT * FROM actors a
    WHERE ($1::text[] IS NULL OR a.atespace = ANY($1))
      AND ($5::text IS NULL OR a.state = $5)
      AND (a.atespace, a.name) > ($2, $3)
    ORDER BY a.atespace, a.name
    LIMIT $4
)
SELECT a.atespace, a.name, a.template, a.state, a.version, a.worker_selector, a.operation,
       a.operation_id, a.last_error, a.created_at, a.updated_at,
       w.id AS worker_id, w.pool AS worker_pool, w.name AS worker_name, w.node AS worker_node,
       w.ip AS worker_ip, NULL::text AS atelet_address,
       s.id AS snapshot_id, s.generation AS snapshot_generation, s.scope AS snapshot_scope,
       s.uri AS snapshot_uri, s.state AS snapshot_state, NULL::jsonb AS snapshot_manifest,
       a.pinned_node, l.id AS local_snapshot_id, l.generation AS local_snapshot_generation,
       a.pending_upload_snapshot_id IS NOT NULL AS upload_pending,
       l.scope AS local_snapshot_scope, l.uri AS local_snapshot_uri,
       a.idle_policy, t.spec -> 'idle' AS template_idle, a.egress_policy,
       EXTRACT(EPOCH FROM now() - a.last_active_at)::float8 AS idle_seconds
FROM page a
LEFT JOIN actor_templates t ON t.atespace = a.atespace AND t.name = a.template
LEFT JOIN workers w ON w.id = a.worker_id
LEFT JOIN snapshots s ON s.id = a.latest_snapshot_id
LEFT JOIN snapshots l ON l.id = COALESCE(a.local_snapshot_id, a.pending_upload_snapshot_id)
ORDER BY a.atespace, a.name;

-- update_actor_selector --
-- Replace an actor's worker_selector (used at its next resume).
UPDATE actors SET worker_selector = $3, version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2
RETURNING version;

-- delete_actor --
-- Delete a SUSPENDED actor.
DELETE FROM actors WHERE atespace = $1 AND name = $2 AND state = 'SUSPENDED'
RETURNING name;

-- lock_actor --
-- Lock one actor row for a state transition, with what the transition needs.
SELECT a.atespace, a.name, a.template, a.state, a.version, a.worker_selector, a.worker_id,
       a.latest_snapshot_id, a.in_progress_snapshot_id, a.local_snapshot_id, a.pending_upload_snapshot_id,
       a.pinned_node, a.resumed_from,
       a.operation, a.operation_id, a.last_error, t.spec, t.golden_snapshot_id, t.phase AS template_phase
FROM actors a JOIN actor_templates t ON t.atespace = a.atespace AND t.name = a.template
WHERE a.atespace = $1 AND a.name = $2
FOR UPDATE OF a;

-- get_snapshot --
-- One snapshot by id.
SELECT id, owner, generation, scope, storage, state, uri, node, sandbox_class, manifest, size_bytes, runsc_version,
       completed_at
FROM snapshots WHERE id = $1;

-- get_worker_ref --
-- A worker with the address of its node's atelet.
SELECT w.id, w.pool, w.name, w.node, w.ip, n.address AS atelet_address
FROM workers w JOIN nodes n ON n.name = w.node
WHERE w.id = $1;

-- view_workers --
-- Every worker with its runtime (the one its atelet reports for it, else its node's runsc build:
-- placement check 4), the resume it is kept for while that stands (and for how many more
-- seconds), and what its places hold: the worker view's full load
-- (store/worker_view.py; at start, after its LISTEN connection is re-made, and at each
-- periodic resync).
SELECT w.id, w.node, w.name, w.state, w.state_reason, w.router_drain_id, w.sandbox_class, w.labels, w.places, w.cpu_millis,
       w.memory_bytes,
       CASE WHEN w.reserved_until > now() THEN w.reserved_for END AS reserved_for,
       GREATEST(EXTRACT(EPOCH FROM w.reserved_until - now()), 0)::float8 AS reserved_seconds,
       CASE WHEN w.sandbox_class = 'gvisor' THEN COALESCE(NULLIF(w.runtime_version, ''), n.runsc_version) ELSE w.runtime_version END AS runsc_version, COALESCE(u.places, 0) AS used_places, COALESCE(u.cpu, 0) AS used_cpu,
       COALESCE(u.memory, 0) AS used_memory
FROM workers w
JOIN nodes n ON n.name = w.node
LEFT JOIN (
    SELECT worker_id, count(*) AS places, sum(cpu_millis) AS cpu, sum(memory_bytes) AS memory
    FROM placements GROUP BY worker_id
) u ON u.worker_id = w.id;

-- view_some_workers --
-- The same for the workers with ids $1 and the workers of the nodes $2 (what notifications named):
-- index lookups only.
SELECT w.id, w.node, w.name, w.state, w.state_reason, w.router_drain_id, w.sandbox_class, w.labels, w.places, w.cpu_millis,
       w.memory_bytes,
       CASE WHEN w.reserved_until > now() THEN w.reserved_for END AS reserved_for,
       GREATEST(EXTRACT(EPOCH FROM w.reserved_until - now()), 0)::float8 AS reserved_seconds,
       CASE WHEN w.sandbox_class = 'gvisor' THEN COALESCE(NULLIF(w.runtime_version, ''), n.runsc_version) ELSE w.runtime_version END AS runsc_version, u.places AS used_places, u.cpu AS used_cpu,
       u.memory AS used_memory
FROM workers w
JOIN nodes n ON n.name = w.node
CROSS JOIN LATERAL (
    SELECT count(*) AS places, COALESCE(sum(p.cpu_millis), 0) AS cpu, COALESCE(sum(p.memory_bytes), 0) AS memory
    FROM placements p WHERE p.worker_id = w.id
) u
WHERE w.id = ANY($1::bigint[]) OR w.node = ANY($2::text[]);

-- lock_worker --
-- Lock a worker row (binds to one worker are serialized on it) and return what the placement
-- checks read of it (and the resume it is kept for, while that stands): the bind checks again what the worker view saw (the view may be stale).
SELECT w.id, w.node, w.state, w.sandbox_class, w.labels, w.places, w.cpu_millis, w.memory_bytes,
       CASE WHEN w.reserved_until > now() THEN w.reserved_for END AS reserved_for,
       GREATEST(EXTRACT(EPOCH FROM w.reserved_until - now()), 0)::float8 AS reserved_seconds,
       CASE WHEN w.sandbox_class = 'gvisor' THEN COALESCE(NULLIF(w.runtime_version, ''), n.runsc_version) ELSE w.runtime_version END AS runsc_version
FROM workers w JOIN nodes n ON n.name = w.node
WHERE w.id = $1
FOR UPDATE OF w;

-- worker_usage --
-- What a worker's placements use. Run as its own statement after `lock_worker`: under READ
-- COMMITTED a statement sees what was committed when it started, so counting in the locking
-- statement itself would miss a bind committed while it waited for the lock (and overbook).
SELECT count(*) AS used_places, COALESCE(sum(cpu_millis), 0) AS used_cpu,
       COALESCE(sum(memory_bytes), 0) AS used_memory
FROM placements WHERE worker_id = $1;

-- insert_placement --
-- Bind a holder to a worker.
INSERT INTO placements (holder, worker_id, operation_id, cpu_millis, memory_bytes)
VALUES ($1, $2, $3, $4, $5);

-- get_placement --
-- The place a holder occupies, if any.
SELECT holder, worker_id, operation_id FROM placements WHERE holder = $1;

-- delete_placement --
-- Free the place a holder occupies.
DELETE FROM placements WHERE holder = $1 RETURNING worker_id;

-- mark_actor_resuming --
-- SUSPENDED|PAUSED -> RESUMING, bound to a worker, guarded by the version read under lock.
UPDATE actors SET state = 'RESUMING', worker_id = $4, operation = 'ResumeActor', operation_id = $5,
                  last_error = NULL, resumed_from = NULL, version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2 AND version = $3
RETURNING version;

-- mark_actor_running --
-- RESUMING -> RUNNING for the operation that holds it; a local snapshot it restored (paused, or
-- async-suspended and not yet uploaded) is consumed (the snapshot GC deletes it from its node)
-- and the actor unpinned.
UPDATE actors SET state = 'RUNNING', operation = NULL, local_snapshot_id = NULL,
                  pending_upload_snapshot_id = NULL, pinned_node = NULL,
                  last_active_at = now(), running_since = now(),
                  version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2 AND state = 'RESUMING' AND operation_id = $3
RETURNING version;

-- rollback_actor_resume --
-- RESUMING -> SUSPENDED (PAUSED when it still has its local snapshot) after a failed resume:
-- unbound, the error recorded.
UPDATE actors SET state = CASE WHEN local_snapshot_id IS NULL THEN 'SUSPENDED' ELSE 'PAUSED' END,
                  worker_id = NULL, operation = NULL, last_error = $4,
                  version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2 AND state = 'RESUMING' AND operation_id = $3
RETURNING version;

-- next_generation --
-- The next snapshot generation of an owner.
SELECT COALESCE(max(generation), 0) + 1 FROM snapshots WHERE owner = $1;

-- insert_snapshot --
-- Record a snapshot about to be written (PENDING: never restored from until COMPLETED).
-- Storage $8: EXTERNAL (the storage location) or LOCAL (on node $7 only).
INSERT INTO snapshots (owner, generation, scope, uri, sandbox_class, operation_id, node, storage)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
RETURNING id;

-- complete_snapshot --
-- PENDING -> COMPLETED, with the manifest the atelet wrote and verified; a FULL snapshot keeps the
-- runsc build that wrote it (placement check 4: only that build restores it).
UPDATE snapshots SET state = 'COMPLETED', manifest = $2, size_bytes = $3, completed_at = now(),
                     runsc_version = CASE WHEN scope = 'FULL' THEN NULLIF($2::jsonb ->> 'runsc_version', '') END
WHERE id = $1 AND state = 'PENDING'
RETURNING id;

-- delete_pending_snapshot --
-- Forget a snapshot that was never completed.
DELETE FROM snapshots WHERE id = $1 AND state = 'PENDING';

-- mark_actor_suspending --
-- RUNNING|PAUSED -> SUSPENDING with the snapshot being written, guarded by version.
UPDATE actors SET state = 'SUSPENDING', operation = 'SuspendActor', operation_id = $4, suspended_from = state,
                  in_progress_snapshot_id = $5, version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2 AND version = $3
RETURNING version;

-- mark_actor_suspended --
-- SUSPENDING -> SUSPENDED: the snapshot becomes the latest, the worker is freed; an uploaded
-- local snapshot is released (the GC deletes it from its node) and the actor unpinned.
UPDATE actors SET state = 'SUSPENDED', worker_id = NULL, latest_snapshot_id = $4,
                  in_progress_snapshot_id = NULL, operation = NULL, last_error = NULL,
                  local_snapshot_id = NULL, pinned_node = NULL,
                  version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2 AND state = 'SUSPENDING' AND operation_id = $3
RETURNING version;

-- rollback_actor_suspend --
-- SUSPENDING|PAUSING -> RUNNING after a failed checkpoint (the sandbox still runs), FROZEN when it
-- started from FROZEN (its sandbox may still be frozen: a checkpoint thaws it only when it runs;
-- the next resume's thaw is a no-op on a running one), or SUSPENDING -> PAUSED after a failed
-- upload of the local snapshot (it is still on its node).
UPDATE actors SET state = CASE WHEN local_snapshot_id IS NOT NULL THEN 'PAUSED'
                               WHEN suspended_from = 'FROZEN' THEN 'FROZEN' ELSE 'RUNNING' END,
                  in_progress_snapshot_id = NULL, operation = NULL,
                  last_error = $4, version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2 AND state IN ('SUSPENDING', 'PAUSING') AND operation_id = $3
RETURNING version;

-- upsert_node --
-- Register an atelet (or refresh its heartbeat): a lost node is alive again.
INSERT INTO nodes (name, address, runsc_version, last_heartbeat) VALUES ($1, $2, $3, now())
ON CONFLICT (name) DO UPDATE
SET address = EXCLUDED.address, runsc_version = EXCLUDED.runsc_version, last_heartbeat = now(), lost_at = NULL
RETURNING name, address, runsc_version, last_heartbeat;

-- upsert_worker --
-- Register a worker of a node as ACTIVE (or refresh it; a worker of a lost node takes actors
-- again at once). $10 is the runtime its atelet reports for it ('' when it reports none: its
-- node's runsc build stands in, placement check 4).
INSERT INTO workers (node, name, pool, ip, sandbox_class, labels, places, cpu_millis, memory_bytes, runtime_version,
                     state)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'ACTIVE')
ON CONFLICT (node, name) DO UPDATE
SET pool = EXCLUDED.pool, ip = EXCLUDED.ip, sandbox_class = EXCLUDED.sandbox_class,
    labels = EXCLUDED.labels, places = EXCLUDED.places, cpu_millis = EXCLUDED.cpu_millis,
    memory_bytes = EXCLUDED.memory_bytes, runtime_version = EXCLUDED.runtime_version,
    state = 'ACTIVE', state_reason = NULL, updated_at = now()
WHERE (workers.pool, workers.ip, workers.sandbox_class, workers.labels, workers.places,
       workers.cpu_millis, workers.memory_bytes, workers.runtime_version, workers.state)
      IS DISTINCT FROM
      (EXCLUDED.pool, EXCLUDED.ip, EXCLUDED.sandbox_class, EXCLUDED.labels, EXCLUDED.places,
       EXCLUDED.cpu_millis, EXCLUDED.memory_bytes, EXCLUDED.runtime_version, 'ACTIVE');

-- retire_missing_workers --
-- Mark the workers a node no longer reports as UNAVAILABLE.
UPDATE workers SET state = 'UNAVAILABLE', updated_at = now()
WHERE node = $1 AND NOT (name = ANY($2::text[])) AND state <> 'UNAVAILABLE';

-- list_workers --
-- Every worker with its node, usage and the holders on it.
SELECT w.id, w.node, w.name, w.pool, w.ip, w.sandbox_class, w.labels, w.state, w.state_reason, w.places,
       w.cpu_millis, w.memory_bytes, n.address AS atelet_address,
       COALESCE(array_agg(p.holder ORDER BY p.holder) FILTER (WHERE p.holder IS NOT NULL), '{}') AS holders,
       COALESCE(sum(p.cpu_millis), 0) AS used_cpu, COALESCE(sum(p.memory_bytes), 0) AS used_memory
FROM workers w
JOIN nodes n ON n.name = w.node
LEFT JOIN placements p ON p.worker_id = w.id
GROUP BY w.id, n.address
ORDER BY w.pool, w.node, w.name;

-- find_snapshot_of_operation --
-- The snapshot an operation reserved for an owner, if any.
SELECT id FROM snapshots WHERE owner = $1 AND operation_id = $2;

-- delete_pending_snapshots_of_operation --
-- Forget the snapshots an operation reserved but never completed.
DELETE FROM snapshots WHERE owner = $1 AND operation_id = $2 AND state = 'PENDING';

-- mark_actor_reverting --
-- Any revertable state -> REVERTING under this operation; the in-progress snapshot is dropped
-- and a paused actor's local snapshot released (the GC deletes it from its node).
UPDATE actors SET state = 'REVERTING', operation = 'RevertActor', operation_id = $3,
                  in_progress_snapshot_id = NULL, unreachable_until = NULL, local_snapshot_id = NULL, pending_upload_snapshot_id = NULL,
                  pinned_node = NULL, version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2
RETURNING version;

-- mark_actor_reverted --
-- REVERTING -> SUSPENDED with the last COMPLETED snapshot; unbound.
UPDATE actors SET state = 'SUSPENDED', worker_id = NULL, operation = NULL,
                  last_error = $4 || COALESCE(' (before: ' || last_error || ')', ''),
                  version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2 AND state = 'REVERTING' AND operation_id = $3
RETURNING version;

-- node_alive --
-- Whether a node is alive: neither lost (silent past its lease) nor retired.
SELECT lost_at IS NULL AND retired_at IS NULL FROM nodes WHERE name = $1;

-- fence_worker --
-- Take a worker out of placement until its atelet reports it idle (its sandbox may still run).
UPDATE workers SET state = 'UNAVAILABLE', state_reason = $2, updated_at = now() WHERE id = $1;

-- crash_actor_on_worker --
-- RUNNING, FROZEN or UNREACHABLE on this worker -> CRASHED with the reason; unbound (the sandbox
-- is gone, or is terminated when its node answers again).
UPDATE actors SET state = 'CRASHED', worker_id = NULL, operation = NULL, last_error = $4,
                  unreachable_until = NULL, unreachable_from = NULL, version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2 AND state IN ('RUNNING', 'FROZEN', 'UNREACHABLE') AND worker_id = $3
RETURNING version;

-- mark_actor_reachable --
-- UNREACHABLE on this worker -> RUNNING (FROZEN when it was frozen): its node answers again and
-- still holds its sandbox.
UPDATE actors SET state = COALESCE(unreachable_from, 'RUNNING'), unreachable_until = NULL, unreachable_from = NULL,
                  last_error = NULL,
                  version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2 AND state = 'UNREACHABLE' AND worker_id = $3
RETURNING version;

-- worker_by_name --
-- A worker of a node by name.
SELECT id FROM workers WHERE node = $1 AND name = $2;

-- placements_of_node --
-- Every place held on a node's workers, with the holder's actor state when it is an actor.
SELECT w.name AS worker, w.id AS worker_id, p.holder, a.atespace, a.name, a.state,
       a.updated_at < now() - make_interval(secs => $2) AS settled
FROM workers w
JOIN placements p ON p.worker_id = w.id
LEFT JOIN actors a ON 'actor/' || a.atespace || '/' || a.name = p.holder
WHERE w.node = $1;

-- node_draining --
-- Whether a node is being drained.
SELECT draining_until IS NOT NULL FROM nodes WHERE name = $1;

-- mark_node_draining --
-- Start (or clear, with NULL) a node's drain; its workers take no new actors meanwhile.
UPDATE nodes SET draining_until = $2 WHERE name = $1 RETURNING name;

-- set_node_workers_state --
-- Set the state of every worker of a node.
UPDATE workers SET state = $2, state_reason = $3, updated_at = now()
WHERE node = $1 AND (state, state_reason) IS DISTINCT FROM ($2, $3);

-- actors_on_node --
-- Actors bound to a node's workers, in any state.
SELECT a.atespace, a.name, a.state, w.id AS worker_id
FROM actors a JOIN workers w ON w.id = a.worker_id
WHERE w.node = $1;

-- lost_nodes --
-- Nodes whose heartbeat is older than $1 seconds (the lease), not retired, and not yet marked
-- lost, or lost with a worker ACTIVE or an actor RUNNING there for the lease all the same (a
-- worker a pod syncer added, a restore that finished as the node fell silent).
SELECT n.name, n.last_heartbeat FROM nodes n
WHERE n.last_heartbeat < now() - make_interval(secs => $1) AND n.retired_at IS NULL
  AND (n.lost_at IS NULL
       OR EXISTS (SELECT 1 FROM workers w WHERE w.node = n.name AND w.state = 'ACTIVE')
       OR EXISTS (SELECT 1 FROM workers w JOIN actors a ON a.worker_id = w.id
                  WHERE w.node = n.name AND a.state IN ('RUNNING', 'FROZEN')
                    AND a.updated_at < now() - make_interval(secs => $1)))
ORDER BY n.name;

-- mark_node_lost --
-- Record when a node was found lost (kept from the first time until a heartbeat clears it).
UPDATE nodes SET lost_at = COALESCE(lost_at, now()) WHERE name = $1;

-- mark_node_actors_unreachable --
-- The RUNNING (and FROZEN) actors of lost node $1 -> UNREACHABLE for the grace ($2 seconds),
-- keeping their worker and place and the state they go back to, with reason $3; each gets a
-- NodeLost record (outcome waiting) in its history.
WITH marked AS (
    UPDATE actors a SET state = 'UNREACHABLE', unreachable_until = now() + make_interval(secs => $2),
                        unreachable_from = a.state,
                        last_error = $3, version = a.version + 1, updated_at = now()
    FROM workers w
    WHERE w.id = a.worker_id AND w.node = $1 AND (a.state = 'RUNNING' OR (a.state = 'FROZEN' AND a.operation IS NULL))
    RETURNING a.atespace, a.name, a.version, w.pool, w.name AS worker
)
INSERT INTO operations (operation_id, atespace, actor, operation, worker, outcome, error)
SELECT 'node-lost/' || atespace || '/' || name || '/' || version, atespace, name, 'NodeLost',
       pool || '/' || worker, 'waiting', $3
FROM marked
RETURNING atespace, actor;

-- expired_unreachable_actors --
-- UNREACHABLE actors whose grace ran out, locked (up to $1), with their node and its last heartbeat.
SELECT a.atespace, a.name, a.worker_id, w.node, n.last_heartbeat,
       extract(epoch FROM now() - n.last_heartbeat)::float8 AS silent_seconds
FROM actors a
LEFT JOIN workers w ON w.id = a.worker_id
LEFT JOIN nodes n ON n.name = w.node
WHERE a.state = 'UNREACHABLE' AND a.unreachable_until < now()
ORDER BY a.atespace, a.name
LIMIT $1
FOR UPDATE OF a SKIP LOCKED;

-- crash_unreachable_actor --
-- UNREACHABLE -> CRASHED with the reason (its grace ran out); unbound.
UPDATE actors SET state = 'CRASHED', worker_id = NULL, operation = NULL, last_error = $3,
                  unreachable_until = NULL, version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2 AND state = 'UNREACHABLE'
RETURNING version;

-- actor_unreachable --
-- Why an UNREACHABLE actor waits: its node, how long it has been silent and how much of the
-- grace is left, in seconds.
SELECT w.node, extract(epoch FROM now() - n.last_heartbeat)::float8 AS silent_seconds,
       extract(epoch FROM a.unreachable_until - now())::float8 AS remaining_seconds
FROM actors a
JOIN workers w ON w.id = a.worker_id
JOIN nodes n ON n.name = w.node
WHERE a.atespace = $1 AND a.name = $2 AND a.state = 'UNREACHABLE';

-- crashed_actors_to_revert --
-- CRASHED actors whose template says onCrash: Revert, the longest crashed first (up to $1),
-- except those automatically recovered $3 times or more in the last $2 seconds (a crash loop).
SELECT a.atespace, a.name, a.last_error
FROM actor_templates t
JOIN actors a ON a.atespace = t.atespace AND a.template = t.name AND a.state = 'CRASHED'
WHERE t.spec ->> 'onCrash' = 'Revert'
  AND (SELECT count(*) FROM operations o
       WHERE o.atespace = a.atespace AND o.actor = a.name AND o.operation = 'RevertActor'
         AND o.error LIKE 'automatic recovery%' AND o.started_at > now() - make_interval(secs => $2)) < $3
ORDER BY a.updated_at
LIMIT $1;

-- stop_crash_loop_recoveries --
-- CRASHED actors of onCrash: Revert templates recovered $2 times or more in the last $1 seconds:
-- their last error gets the notice $3 (once), and they stay CRASHED.
UPDATE actors a SET last_error = coalesce(a.last_error, 'crashed') || $3
FROM actor_templates t
WHERE a.atespace = t.atespace AND a.template = t.name AND a.state = 'CRASHED'
  AND t.spec ->> 'onCrash' = 'Revert'
  AND position($3 IN coalesce(a.last_error, '')) = 0
  AND (SELECT count(*) FROM operations o
       WHERE o.atespace = a.atespace AND o.actor = a.name AND o.operation = 'RevertActor'
         AND o.error LIKE 'automatic recovery%' AND o.started_at > now() - make_interval(secs => $1)) >= $2
RETURNING a.atespace, a.name;

-- insert_operation --
-- Record an operation as started, with why ate started it by itself ($6: 'idle for 300 s',
-- 'pressure: ...'; NULL when a user asked).
INSERT INTO operations (operation_id, atespace, actor, operation, worker, reason)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (operation_id) DO UPDATE SET worker = COALESCE(EXCLUDED.worker, operations.worker);

-- finish_operation --
-- Record an operation's outcome.
UPDATE operations SET outcome = $2, error = $3, finished_at = now(), worker = COALESCE($4, worker)
WHERE operation_id = $1 AND finished_at IS NULL;

-- actor_operations --
-- The last operations of an actor.
SELECT operation_id, operation, outcome, worker, error, started_at, finished_at, reason
FROM operations WHERE atespace = $1 AND actor = $2
ORDER BY started_at DESC LIMIT $3;

-- create_tag --
-- Point a tag at a snapshot.
INSERT INTO tags (atespace, name, snapshot_id, source_actor) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING
RETURNING atespace, name, snapshot_id, source_actor, created_at;

-- get_tag --
-- One tag with its snapshot and the source actor's template.
SELECT t.atespace, t.name, t.snapshot_id, t.source_actor, t.created_at, s.generation, s.scope, s.uri,
       a.template
FROM tags t JOIN snapshots s ON s.id = t.snapshot_id
LEFT JOIN actors a ON a.atespace = t.atespace AND a.name = t.source_actor
WHERE t.atespace = $1 AND t.name = $2;

-- list_tags --
-- The tags of an atespace.
SELECT t.atespace, t.name, t.snapshot_id, t.source_actor, t.created_at, s.generation, s.scope, s.uri,
       NULL::text AS template
FROM tags t JOIN snapshots s ON s.id = t.snapshot_id
WHERE t.atespace = $1 ORDER BY t.name;

-- set_actor_snapshot --
-- Start a new actor from an existing snapshot (a tag's).
UPDATE actors SET latest_snapshot_id = $3 WHERE atespace = $1 AND name = $2 AND state = 'SUSPENDED';

-- garbage_snapshots --
-- Snapshots the collector deletes: those it claimed before (deleted_at set: their deletion is
-- retried), and those nothing refers to (not an actor's latest, in-progress, local or awaiting-upload
-- one, not a tag's, not a template's golden one) that either have no owner any more, or are
-- COMPLETED with at least retained_generations(owner, $3) newer COMPLETED generations of the same
-- owner, or are PENDING with a newer COMPLETED one, or are LOCAL (only a paused actor keeps one).
-- Unclaimed ones younger than $2 seconds are left alone (a live operation's PENDING row). $4: only
-- that snapshot (the collector's check under the owner's lock), or NULL. At most $1, oldest first.
SELECT s.id, s.uri, s.owner, s.generation, s.storage, s.node, s.deleted_at FROM snapshots s
WHERE ($4::bigint IS NULL OR s.id = $4) AND (s.deleted_at IS NOT NULL OR (
  s.created_at < now() - make_interval(secs => $2)
  AND NOT EXISTS (SELECT 1 FROM actors a WHERE a.latest_snapshot_id = s.id OR a.in_progress_snapshot_id = s.id
                                           OR a.local_snapshot_id = s.id OR a.pending_upload_snapshot_id = s.id)
  AND NOT EXISTS (SELECT 1 FROM tags t WHERE t.snapshot_id = s.id)
  AND NOT EXISTS (SELECT 1 FROM actor_templates t WHERE t.golden_snapshot_id = s.id)
  AND (
    (s.owner LIKE 'actor/%' AND NOT EXISTS (
        SELECT 1 FROM actors a WHERE a.atespace = split_part(s.owner, '/', 2) AND a.name = split_part(s.owner, '/', 3)))
    OR (s.owner LIKE 'template/%' AND NOT EXISTS (
        SELECT 1 FROM actor_templates t WHERE t.atespace = split_part(s.owner, '/', 2) AND t.name = split_part(s.owner, '/', 3)))
    OR (s.state = 'COMPLETED' AND (
        SELECT count(*) FROM snapshots n WHERE n.owner = s.owner AND n.generation > s.generation
                                           AND n.state = 'COMPLETED' AND n.deleted_at IS NULL
        ) >= retained_generations(s.owner, $3))
    OR (s.state <> 'COMPLETED' AND EXISTS (
        SELECT 1 FROM snapshots n WHERE n.owner = s.owner AND n.generation > s.generation AND n.state = 'COMPLETED'))
    OR s.storage = 'LOCAL'
  )
))
ORDER BY s.id
LIMIT $1;

-- claim_snapshot --
-- The collector takes a snapshot for deletion: from here on nothing may refer to it (a revert to
-- its generation, a fork or a tag refuses it); its row goes when its data is deleted.
UPDATE snapshots SET deleted_at = now() WHERE id = $1 AND deleted_at IS NULL;

-- kept_generations --
-- The COMPLETED generations of owner $1 the collector has not claimed, oldest first.
SELECT generation FROM snapshots WHERE owner = $1 AND state = 'COMPLETED' AND deleted_at IS NULL
ORDER BY generation;

-- kept_generation --
-- The snapshot of owner $1's generation $2 when it is COMPLETED and not claimed by the collector;
-- locked, so a claim waits for the transaction that takes it.
SELECT id FROM snapshots WHERE owner = $1 AND generation = $2 AND state = 'COMPLETED' AND deleted_at IS NULL
FOR UPDATE;

-- set_latest_snapshot --
-- The snapshot an actor rests on from now (a revert to an earlier generation).
UPDATE actors SET latest_snapshot_id = $3, version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2;

-- delete_snapshot_row --
-- Forget a snapshot whose data is deleted.
DELETE FROM snapshots WHERE id = $1;

-- any_live_atelet --
-- The node name and address of a live atelet, the most recently heard first (for snapshot deletion).
SELECT name, address FROM nodes WHERE lost_at IS NULL AND retired_at IS NULL
ORDER BY last_heartbeat DESC LIMIT 1;

-- crash_actor_after_deadline --
-- Any state on this worker -> CRASHED (eviction deadline passed); the last COMPLETED snapshot stays latest.
UPDATE actors SET state = 'CRASHED', worker_id = NULL, operation = NULL, last_error = $4,
                  in_progress_snapshot_id = NULL, version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2 AND worker_id = $3
RETURNING version;

-- placement_held --
-- Whether a holder still holds its place on a worker under an operation.
SELECT EXISTS (SELECT 1 FROM placements WHERE holder = $1 AND worker_id = $2 AND operation_id = $3);

-- actor_held_by_operation --
-- Whether an actor is still bound to a worker under an operation (e.g. SUSPENDING under its suspend).
SELECT EXISTS (SELECT 1 FROM actors WHERE atespace = $1 AND name = $2 AND worker_id = $3 AND operation_id = $4);

-- mark_actor_pausing --
-- RUNNING -> PAUSING with the local snapshot being written, guarded by version.
UPDATE actors SET state = 'PAUSING', operation = 'PauseActor', operation_id = $4, suspended_from = state,
                  in_progress_snapshot_id = $5, version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2 AND version = $3
RETURNING version;

-- mark_actor_paused --
-- PAUSING -> PAUSED: the local snapshot $4 is kept on node $5, which the actor is pinned to; the
-- worker is freed. The latest snapshot (in the storage location) stays what a revert returns to.
UPDATE actors SET state = 'PAUSED', worker_id = NULL, local_snapshot_id = $4, pinned_node = $5,
                  in_progress_snapshot_id = NULL, operation = NULL, last_error = NULL,
                  version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2 AND state = 'PAUSING' AND operation_id = $3
RETURNING version;

-- node_address --
-- A node's atelet address, whether it is alive (neither lost nor retired), and for how many
-- seconds it has been silent.
SELECT address, lost_at IS NULL AND retired_at IS NULL AS alive,
       extract(epoch FROM now() - last_heartbeat)::float8 AS silent_seconds
FROM nodes WHERE name = $1;

-- actors_pinned_to_node --
-- Actors whose local (paused) snapshot lies on a node.
SELECT atespace, name, state FROM actors WHERE pinned_node = $1;

-- crash_paused_actor_after_deadline --
-- PAUSED (or async-SUSPENDED) on a drained node whose local snapshot was not uploaded in time ->
-- CRASHED; the local snapshot is released (it goes with the node) and the last COMPLETED
-- snapshot stays latest.
UPDATE actors SET state = 'CRASHED', operation = NULL, last_error = $4, local_snapshot_id = NULL,
                  pending_upload_snapshot_id = NULL, pinned_node = NULL, version = version + 1,
                  updated_at = now()
WHERE atespace = $1 AND name = $2 AND state IN ('PAUSED', 'SUSPENDED') AND pinned_node = $3
RETURNING version;

-- mark_actor_suspended_locally --
-- SUSPENDING -> SUSPENDED by an async suspend: the checkpoint $4 is on node $5, to be uploaded in
-- the background; the actor is pinned there until then. The worker is freed.
UPDATE actors SET state = 'SUSPENDED', worker_id = NULL, pending_upload_snapshot_id = $4, pinned_node = $5,
                  in_progress_snapshot_id = NULL, operation = NULL, last_error = NULL,
                  version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2 AND state = 'SUSPENDING' AND operation_id = $3
RETURNING version;

-- lock_actor_pending_upload --
-- The actor's row, locked, with what an upload of its local snapshot needs to know.
SELECT a.state, a.pending_upload_snapshot_id, a.latest_snapshot_id, a.pinned_node,
       s.generation AS latest_generation
FROM actors a LEFT JOIN snapshots s ON s.id = a.latest_snapshot_id
WHERE a.atespace = $1 AND a.name = $2
FOR UPDATE OF a;

-- mark_actor_uploaded --
-- The background upload of the local snapshot landed as snapshot $3: it becomes the latest; the
-- actor is unpinned unless a resume is restoring the local copy right now (that resume's finish
-- unpins it).
UPDATE actors SET latest_snapshot_id = $3,
                  pending_upload_snapshot_id = CASE WHEN state = 'RESUMING' THEN pending_upload_snapshot_id END,
                  pinned_node = CASE WHEN state = 'RESUMING' THEN pinned_node END,
                  version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2
RETURNING version;

-- node_retired --
-- When the node was retired (its worker pod deleted), or NULL.
SELECT retired_at FROM nodes WHERE name = $1;

-- upsert_pod_node --
-- The pod syncer's view of a worker pod's node: its address and whether the pod is Ready. The
-- heartbeat stays the atelet's: a new row starts with a heartbeat of now (so it is lost unless its
-- atelet registers within the lease).
INSERT INTO nodes (name, address, pod_not_ready, worker_pod) VALUES ($1, $2, $3, true)
ON CONFLICT (name) DO UPDATE SET address = EXCLUDED.address, pod_not_ready = EXCLUDED.pod_not_ready,
                                 worker_pod = true
WHERE nodes.retired_at IS NULL
  AND (nodes.address, nodes.pod_not_ready, nodes.worker_pod)
      IS DISTINCT FROM (EXCLUDED.address, EXCLUDED.pod_not_ready, true)
RETURNING name;

-- live_pod_nodes --
-- The nodes the pod syncer made that are not retired: worker pods it believes exist.
SELECT name FROM nodes WHERE worker_pod AND retired_at IS NULL ORDER BY name;

-- hold_unready_pod_workers --
-- The workers of a node whose pod is not Ready are UNAVAILABLE, whatever its heartbeat says.
UPDATE workers w SET state = 'UNAVAILABLE', state_reason = 'pod not Ready', updated_at = now()
FROM nodes n
WHERE w.node = n.name AND n.name = $1 AND n.pod_not_ready
  AND (w.state, w.state_reason) IS DISTINCT FROM ('UNAVAILABLE', 'pod not Ready');

-- lift_unready_pod_workers --
-- The pod is Ready again: its workers held back as "pod not Ready" are ACTIVE (unless fenced or
-- draining, which the heartbeat's reconciliation re-applies).
UPDATE workers SET state = 'ACTIVE', state_reason = NULL, updated_at = now()
WHERE node = $1 AND state = 'UNAVAILABLE' AND state_reason = 'pod not Ready' AND router_drain_id IS NULL;

-- release_actors_of_node --
-- A node is gone for good (its pod was deleted): every actor bound to its workers or pinned to it
-- goes back to SUSPENDED with its last COMPLETED snapshot and reason $2, except one that ran there
-- (RUNNING, FROZEN or UNREACHABLE: its memory is gone), which is CRASHED with reason $3 (a CRASHED one
-- stays CRASHED); the caller drops the PENDING snapshots of operations in flight
-- (lock_actors_of_node lists them).
UPDATE actors a SET
    state = CASE WHEN a.state IN ('CRASHED', 'RUNNING', 'FROZEN', 'UNREACHABLE') THEN 'CRASHED' ELSE 'SUSPENDED' END,
    worker_id = NULL, operation = NULL, local_snapshot_id = NULL, pending_upload_snapshot_id = NULL,
    pinned_node = NULL, in_progress_snapshot_id = NULL, unreachable_until = NULL, unreachable_from = NULL,
    last_error = CASE WHEN a.state = 'CRASHED' THEN a.last_error
                      WHEN a.state IN ('RUNNING', 'FROZEN', 'UNREACHABLE') THEN $3 ELSE $2 END,
    version = a.version + 1, updated_at = now()
WHERE a.worker_id IN (SELECT id FROM workers WHERE node = $1) OR a.pinned_node = $1
RETURNING a.atespace, a.name, a.state, a.version;

-- lock_actors_of_node --
-- The actors bound to a node's workers or pinned to it, locked, with their in-progress snapshot.
SELECT atespace, name, in_progress_snapshot_id FROM actors
WHERE worker_id IN (SELECT id FROM workers WHERE node = $1) OR pinned_node = $1
ORDER BY atespace, name FOR UPDATE;

-- delete_placements_of_node --
-- Free every place on a node's workers.
DELETE FROM placements WHERE worker_id IN (SELECT id FROM workers WHERE node = $1);

-- delete_workers_of_node --
-- Forget a node's workers.
DELETE FROM workers WHERE node = $1;

-- retire_node --
-- Keep the node's row as a tombstone: it never registers again.
UPDATE nodes SET retired_at = now(), pod_not_ready = true WHERE name = $1 AND retired_at IS NULL RETURNING name;

-- insert_token --
-- A new token ($1 id, $2 name, $3 secret hash, $4 grants, $5 creator, $6 expiry or NULL).
INSERT INTO tokens (id, name, secret_hash, grants, created_by, expires_at) VALUES ($1, $2, $3, $4, $5, $6)
RETURNING id, name, grants, created_by, created_at, expires_at, revoked_at;

-- get_token --
-- One token with its secret hash.
SELECT id, name, secret_hash, grants, created_by, created_at, expires_at, revoked_at FROM tokens WHERE id = $1;

-- list_tokens --
-- Every token not revoked, newest first.
SELECT id, name, grants, created_by, created_at, expires_at, revoked_at FROM tokens
WHERE revoked_at IS NULL ORDER BY created_at DESC;

-- revoke_token --
-- Revoke a token (idempotent: a revoked one keeps its first revocation time).
UPDATE tokens SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1 RETURNING id;

-- touch_actors --
-- Router replicas saw traffic for these actors ($1 atespaces, $2 names, pairwise): last_active_at = now(); rows locked in key order (no deadlock between replicas).
UPDATE actors a SET last_active_at = now()
FROM (
    SELECT x.atespace, x.name FROM actors x
    JOIN unnest($1::text[], $2::text[]) AS t(atespace, name) ON x.atespace = t.atespace AND x.name = t.name
    ORDER BY x.atespace, x.name
    FOR UPDATE OF x
) AS touched
WHERE a.atespace = touched.atespace AND a.name = touched.name;

-- touch_egress_active --
-- Node $1's egress proxy saw outbound traffic of these actors ($2 worker names, $3 atespaces, $4 names, by threes): last_active_at = now(), for an actor placed on that worker of that node only; rows locked in key order (as touch_actors).
UPDATE actors a SET last_active_at = now()
FROM (
    SELECT x.atespace, x.name FROM actors x
    JOIN workers w ON w.id = x.worker_id AND w.node = $1
    JOIN unnest($2::text[], $3::text[], $4::text[]) AS t(worker, atespace, name)
        ON w.name = t.worker AND x.atespace = t.atespace AND x.name = t.name
    ORDER BY x.atespace, x.name
    FOR UPDATE OF x
) AS touched
WHERE a.atespace = touched.atespace AND a.name = touched.name;

-- registry_images_for_node --
-- The registry images of the templates ($1: a node) whose sandbox class its active workers serve: each container image that is not a local layout, of a template not Failed, once each, at most $2.
SELECT DISTINCT c->>'image' AS image
FROM actor_templates t, jsonb_array_elements(t.spec->'containers') AS c
WHERE t.phase <> 'Failed' AND c->>'image' NOT LIKE 'oci:%'
  AND COALESCE(t.spec->>'sandboxClass', 'gvisor') IN (
      SELECT DISTINCT w.sandbox_class FROM workers w WHERE w.node = $1 AND w.state = 'ACTIVE')
ORDER BY 1
LIMIT $2;

-- heartbeat_router --
-- Register a router replica or refresh its lease ($1 name, $2 lease seconds, $3 drain timeout seconds).
INSERT INTO router_replicas (name, lease_seconds, drain_timeout_seconds) VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE
SET last_seen_at = now(), lease_seconds = EXCLUDED.lease_seconds, drain_timeout_seconds = EXCLUDED.drain_timeout_seconds
RETURNING started_at;

-- release_router_lease --
-- Replica $1 stopped cleanly and gives its lease back: no longer live from now on (its row is kept
-- for `GET /v1/routers` until forget_silent_routers drops it); NULL when no such replica.
UPDATE router_replicas SET lease_seconds = 0, last_seen_at = now() WHERE name = $1 RETURNING name;

-- forget_silent_routers --
-- Drop replicas silent for an hour past their lease (a stopped replica's row is kept that long, for `GET /v1/routers`).
DELETE FROM router_replicas WHERE last_seen_at < now() - make_interval(secs => lease_seconds) - interval '1 hour';

-- list_routers --
-- Every registered replica and whether its lease still runs.
SELECT r.name, r.started_at, r.last_seen_at, r.lease_seconds, r.drain_timeout_seconds,
       r.last_seen_at > now() - make_interval(secs => r.lease_seconds) AS live
FROM router_replicas r ORDER BY r.name;

-- pending_router_drains --
-- The drains of the last 5 minutes replica $1 has not acknowledged, oldest first (if_idle: an idle action's).
SELECT d.id, d.atespace, d.name, d.if_idle FROM router_drains d
WHERE d.requested_at > now() - interval '5 minutes'
  AND NOT EXISTS (SELECT 1 FROM router_drain_acks a WHERE a.drain_id = d.id AND a.replica = $1)
ORDER BY d.id LIMIT 1000;

-- record_router_drain --
-- The drain of actor ($2, $3) for operation $1, an idle action's when $4 (the same row for a retry of that operation).
INSERT INTO router_drains (operation_id, atespace, name, if_idle) VALUES ($1, $2, $3, $4)
ON CONFLICT (operation_id) DO UPDATE SET operation_id = EXCLUDED.operation_id
RETURNING id, if_idle;

-- notify_router_drain --
-- Tell the listening replicas at once ($1 payload "<id> <atespace>/<name>").
SELECT pg_notify('ate_router_drains', $1);

-- prune_router_drains --
-- Forget drains older than an hour (with their acknowledgements).
DELETE FROM router_drains WHERE requested_at < now() - interval '1 hour';

-- router_drain_waiting --
-- Live replicas (heard from within their lease) that have not acknowledged drain $1, with their drain timeouts; and those that have (busy: refused an if-idle drain).
SELECT r.name, r.drain_timeout_seconds, (a.drain_id IS NOT NULL) AS acked, COALESCE(a.busy, false) AS busy
FROM router_replicas r
LEFT JOIN router_drain_acks a ON a.drain_id = $1 AND a.replica = r.name
WHERE r.last_seen_at > now() - make_interval(secs => r.lease_seconds) OR a.drain_id IS NOT NULL
ORDER BY r.name;

-- ack_router_drain --
-- Replica $2 has drained drain $1, or refused it busy ($3, an if-idle drain with a request in flight) (idempotent: the first answer stays); NULL when no such drain.
INSERT INTO router_drain_acks (drain_id, replica, busy)
SELECT id, $2, $3 FROM router_drains WHERE id = $1
ON CONFLICT DO NOTHING
RETURNING drain_id;

-- hold_worker_for_router_drain --
-- Worker $1's actor crashed: hold the worker UNAVAILABLE (reason $3) until the live router replicas
-- drained that actor (drain $2); nothing to hold when no replica is live.
UPDATE workers SET router_drain_id = $2, state = 'UNAVAILABLE', state_reason = $3, updated_at = now()
WHERE id = $1 AND EXISTS (
    SELECT 1 FROM router_replicas r WHERE r.last_seen_at > now() - make_interval(secs => r.lease_seconds)
)
RETURNING id;

-- hold_router_draining_workers --
-- At node $1's heartbeat: its workers whose crashed actor a live router replica has yet to drain stay
-- UNAVAILABLE; a replica is waited for until its drain timeout plus $2 s (at most $3 s) passed since the
-- drain was recorded, as the drain step before a checkpoint waits. The drains that are done are
-- forgotten (`release_router_drained_workers`).
UPDATE workers w
SET state = 'UNAVAILABLE', updated_at = now(),
    state_reason = 'held until every router replica has drained ' || d.atespace || '/' || d.name
                   || ' (its sandbox crashed on this worker); free again within '
                   || ceil(LEAST(r.wait, $3))::int || ' s of the crash'
FROM router_drains d,
     LATERAL (
         SELECT max(x.drain_timeout_seconds + $2) AS wait FROM router_replicas x
         WHERE x.last_seen_at > now() - make_interval(secs => x.lease_seconds)
           AND NOT EXISTS (SELECT 1 FROM router_drain_acks a WHERE a.drain_id = d.id AND a.replica = x.name)
           AND d.requested_at > now() - make_interval(secs => LEAST(x.drain_timeout_seconds + $2, $3))
     ) r
WHERE w.node = $1 AND d.id = w.router_drain_id AND r.wait IS NOT NULL
RETURNING w.id;

-- release_router_drained_workers --
-- Forget the router drains of node $1's workers that no live replica is waited for any more (the
-- bound as in `hold_router_draining_workers`); the heartbeat's registration made them ACTIVE.
UPDATE workers w SET router_drain_id = NULL
FROM router_drains d
WHERE w.node = $1 AND d.id = w.router_drain_id AND NOT EXISTS (
    SELECT 1 FROM router_replicas x
    WHERE x.last_seen_at > now() - make_interval(secs => x.lease_seconds)
      AND NOT EXISTS (SELECT 1 FROM router_drain_acks a WHERE a.drain_id = d.id AND a.replica = x.name)
      AND d.requested_at > now() - make_interval(secs => LEAST(x.drain_timeout_seconds + $2, $3))
)
RETURNING w.id;

-- router_drain_exists --
-- Whether drain $1 exists.
SELECT EXISTS (SELECT 1 FROM router_drains WHERE id = $1);

-- mark_actor_freezing --
-- RUNNING -> FROZEN under FreezeActor $4, guarded by the version read under lock: written before
-- the sandbox is stopped, so the routers stop sending at its NOTIFY.
UPDATE actors SET state = 'FROZEN', operation = 'FreezeActor', operation_id = $4,
                  version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2 AND version = $3
RETURNING version;

-- finish_actor_freeze --
-- The sandbox is stopped: the FROZEN actor rests (no operation holds it any more).
UPDATE actors SET operation = NULL, version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2 AND state = 'FROZEN' AND operation = 'FreezeActor' AND operation_id = $3
RETURNING version;

-- rollback_actor_freeze --
-- FROZEN -> RUNNING under FreezeActor $3: the freeze gave way to traffic (the sandbox was not
-- stopped) or the atelet could not stop it; $4 the error, NULL when traffic won.
UPDATE actors SET state = 'RUNNING', operation = NULL, last_error = $4, version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2 AND state = 'FROZEN' AND operation = 'FreezeActor' AND operation_id = $3
RETURNING version;

-- mark_actor_thawing --
-- FROZEN -> RESUMING under ResumeActor $4 on the worker it holds (its sandbox is thawed next),
-- guarded by the version read under lock; its place passes to this operation.
WITH thawing AS (
    UPDATE actors SET state = 'RESUMING', operation = 'ResumeActor', operation_id = $4, last_error = NULL,
                      resumed_from = 'FROZEN', version = version + 1, updated_at = now()
    WHERE atespace = $1 AND name = $2 AND version = $3 AND state = 'FROZEN'
    RETURNING version
), placed AS (
    UPDATE placements SET operation_id = $4 WHERE holder = 'actor/' || $1 || '/' || $2 AND EXISTS (SELECT 1 FROM thawing)
)
SELECT version FROM thawing;

-- idle_candidates --
-- The actors an idle policy may act on now: RUNNING, FROZEN or PAUSED, no operation in flight,
-- whose next step (the policy's first for RUNNING, its first beyond Freeze for FROZEN, its Suspend
-- for PAUSED; their own policy, else their template's) is due. Only actors on a worker or pinned to
-- a node are looked at (by state: bounded by the workers' places and the nodes' disks, not by the
-- actor population); those with nothing left to do never come back, so they cannot crowd out the
-- rest. The longest idle first, at most $1.
SELECT a.atespace, a.name, a.state, p.policy,
       EXTRACT(EPOCH FROM now() - a.last_active_at)::float8 AS idle_seconds
FROM actors a
JOIN actor_templates t ON t.atespace = a.atespace AND t.name = a.template
CROSS JOIN LATERAL (SELECT COALESCE(a.idle_policy, t.spec -> 'idle') AS policy) p
CROSS JOIN LATERAL (
    SELECT (step ->> 'afterSeconds')::float8 AS after_seconds
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p.policy) = 'array' THEN p.policy ELSE '[]'::jsonb END)
         WITH ORDINALITY AS s(step, position)
    WHERE a.state = 'RUNNING'
       OR (a.state = 'FROZEN' AND step ->> 'action' <> 'Freeze')
       OR (a.state = 'PAUSED' AND step ->> 'action' = 'Suspend')
    ORDER BY position
    LIMIT 1
) next
WHERE a.state IN ('RUNNING', 'FROZEN', 'PAUSED') AND a.operation IS NULL
  AND a.last_active_at <= now() - make_interval(secs => next.after_seconds)
ORDER BY a.last_active_at
LIMIT $1;

-- set_actor_egress_policy --
-- The actor's own egress policy ($3: the document form; NULL: its template's again).
UPDATE actors SET egress_policy = $3, version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2
RETURNING version;

-- set_actor_idle_policy --
-- The actor's own idle policy ($3: a list of steps; an empty list: off for it; NULL: its
-- template's again).
UPDATE actors SET idle_policy = $3, version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2
RETURNING version;

-- pressure_candidates --
-- Actors that may be moved off their worker to make room for actor $1/$2's resume: their template
-- opted in (suspendUnderPressure), RUNNING or FROZEN with no operation in flight, on a worker of a
-- live node that is not kept for another resume ($4: this resume's holder); frozen ones first, then
-- the longest idle; at most $3. The caller checks each one's worker against the resume's demand and
-- its template's minimum run time.
SELECT a.atespace, a.name, t.spec -> 'suspendUnderPressure' AS pressure, w.id AS worker_id,
       EXTRACT(EPOCH FROM now() - COALESCE(a.running_since, a.updated_at))::float8 AS running_seconds,
       EXTRACT(EPOCH FROM now() - a.last_active_at)::float8 AS idle_seconds,
       w.node, w.pool, w.name AS worker, w.state, w.state_reason, w.router_drain_id, w.sandbox_class, w.labels,
       w.places, w.cpu_millis, w.memory_bytes,
       CASE WHEN w.sandbox_class = 'gvisor' THEN COALESCE(NULLIF(w.runtime_version, ''), n.runsc_version)
            ELSE w.runtime_version END AS runsc_version
FROM actors a
JOIN actor_templates t ON t.atespace = a.atespace AND t.name = a.template
JOIN workers w ON w.id = a.worker_id
JOIN nodes n ON n.name = w.node
WHERE a.state IN ('RUNNING', 'FROZEN') AND a.operation IS NULL
  AND COALESCE(t.spec -> 'suspendUnderPressure', 'false'::jsonb) <> 'false'::jsonb
  AND n.lost_at IS NULL AND n.retired_at IS NULL
  AND NOT (a.atespace = $1 AND a.name = $2)
  AND (w.reserved_for IS NULL OR w.reserved_until <= now() OR w.reserved_for = $4)
ORDER BY a.state = 'FROZEN' DESC, a.last_active_at
LIMIT $3;

-- reserve_worker --
-- Keep worker $1 for the resume of holder $2 for $3 seconds, unless it is kept for another resume
-- now: the id when it is (a concurrent reservation waits for this row's lock and then sees it).
UPDATE workers SET reserved_for = $2, reserved_until = now() + make_interval(secs => $3)
WHERE id = $1 AND (reserved_for IS NULL OR reserved_until <= now() OR reserved_for = $2)
RETURNING id;

-- leave_room_queue --
-- Holder $1 was placed (or stopped waiting): it leaves the room queue, and the workers kept for it
-- are free for anyone again.
WITH gone AS (DELETE FROM room_waiters WHERE holder = $1)
UPDATE workers SET reserved_for = NULL, reserved_until = NULL WHERE reserved_for = $1;

-- join_room_queue --
-- Holder $1's resume ($2: its operation) found no room: it waits in the queue from now, or from
-- when it began waiting if it kept trying since (its last try within $5 s), asking demand $3 of
-- pool $4. Returns when it began waiting.
INSERT INTO room_waiters (holder, operation_id, since, seen_at, demand, pool)
VALUES ($1, $2, now(), now(), $3, $4)
ON CONFLICT (holder) DO UPDATE
SET operation_id = EXCLUDED.operation_id, demand = EXCLUDED.demand, pool = EXCLUDED.pool, seen_at = now(),
    since = CASE WHEN room_waiters.seen_at > now() - make_interval(secs => $5) THEN room_waiters.since ELSE now() END
RETURNING since;

-- room_waiters_ahead --
-- The live waiters (a try within $1 s) that began waiting no later than $2, with no worker kept for
-- them now, oldest first (at most $3): who a worker emptied now is kept for.
SELECT r.holder, r.operation_id, r.demand
FROM room_waiters r
WHERE r.seen_at > now() - make_interval(secs => $1) AND r.since <= $2
  AND NOT EXISTS (SELECT 1 FROM workers w WHERE w.reserved_for = r.holder AND w.reserved_until > now())
ORDER BY r.since, r.holder
LIMIT $3;

-- room_waiters_by_pool --
-- The live waiters (a try within $1 s) by the pool they would take: the demand for room.
SELECT pool, count(*) AS waiting FROM room_waiters
WHERE seen_at > now() - make_interval(secs => $1)
GROUP BY pool;

-- worker_pool_shapes --
-- One row per pool and worker shape (what placement checks of a worker, its runtime included):
-- which pool a waiter would take.
SELECT DISTINCT w.pool, 'ACTIVE' AS state, NULL::text AS state_reason, NULL::bigint AS router_drain_id,
       w.sandbox_class, w.labels, w.places, w.cpu_millis, w.memory_bytes, '' AS node,
       CASE WHEN w.sandbox_class = 'gvisor' THEN COALESCE(NULLIF(w.runtime_version, ''), n.runsc_version)
            ELSE w.runtime_version END AS runsc_version
FROM workers w JOIN nodes n ON n.name = w.node
WHERE n.lost_at IS NULL AND n.retired_at IS NULL
ORDER BY w.pool;

-- release_victims_room --
-- The moves of the actors ($1[i], $2[i]) (atespaces, names) gave way or failed: those still
-- resting on their worker (RUNNING or FROZEN) leave it kept for nobody. Index lookups only.
UPDATE workers w SET reserved_for = NULL, reserved_until = NULL
FROM actors a JOIN unnest($1::text[], $2::text[]) AS v (atespace, name) ON a.atespace = v.atespace AND a.name = v.name
WHERE a.worker_id = w.id AND a.state IN ('RUNNING', 'FROZEN') AND w.reserved_for IS NOT NULL;

-- rollback_actor_thaw --
-- RESUMING -> FROZEN after a thaw that failed for good ($4: why): the sandbox keeps its worker, its
-- place and its memory (frozen, as far as anyone knows); the next resume thaws it again.
UPDATE actors SET state = 'FROZEN', operation = NULL, resumed_from = NULL, last_error = $4,
                  version = version + 1, updated_at = now()
WHERE atespace = $1 AND name = $2 AND state = 'RESUMING' AND operation_id = $3 AND resumed_from = 'FROZEN'
RETURNING version;

-- insert_secret --
-- A new secret ($1 atespace, $2 name, $3 key id, $4 sealed value, $5 size, $6 creator, $7 type,
-- $8 registry or NULL); nothing when the name is taken.
INSERT INTO secrets (atespace, name, key_id, sealed, size_bytes, created_by, type, registry)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (atespace, name) DO NOTHING
RETURNING atespace, name, type, registry, key_id, size_bytes, created_by, created_at, updated_at;

-- list_secrets --
-- An atespace's secrets by name, without their values.
SELECT atespace, name, type, registry, key_id, size_bytes, created_by, created_at, updated_at FROM secrets
WHERE atespace = $1 ORDER BY name;

-- get_secret --
-- One secret, without its value.
SELECT atespace, name, type, registry, key_id, size_bytes, created_by, created_at, updated_at FROM secrets
WHERE atespace = $1 AND name = $2;

-- get_sealed_secret_of_type --
-- One secret's sealed value, its key, type and registry.
SELECT key_id, sealed, type, registry FROM secrets WHERE atespace = $1 AND name = $2;

-- pull_secrets_for_node --
-- The registry secrets for registry $3 that the templates ($1: a node) whose sandbox class its
-- active workers serve list in imagePullSecrets, when one of their containers runs image $2 (as
-- recorded, pinned): the credentials node $1 may pull $2 with. Each once, at most $4.
SELECT DISTINCT s.atespace, s.name, s.key_id, s.sealed, s.registry
FROM actor_templates t
CROSS JOIN LATERAL jsonb_array_elements(t.spec->'containers') AS c
CROSS JOIN LATERAL jsonb_array_elements(COALESCE(t.spec->'imagePullSecrets', '[]'::jsonb)) AS p
JOIN secrets s ON s.atespace = t.atespace AND s.name = p->>'name' AND s.type = 'registry' AND s.registry = $3
WHERE t.phase <> 'Failed' AND c->>'image' = $2
  AND COALESCE(t.spec->>'sandboxClass', 'gvisor') IN (
      SELECT DISTINCT w.sandbox_class FROM workers w WHERE w.node = $1 AND w.state = 'ACTIVE')
ORDER BY s.atespace, s.name
LIMIT $4;

-- delete_secret --
DELETE FROM secrets WHERE atespace = $1 AND name = $2 RETURNING name;

-- secrets_sealed_by_others --
-- Up to $2 secrets sealed by another key than $1 (the primary): what a rotation re-seals.
SELECT atespace, name, key_id, sealed FROM secrets WHERE key_id <> $1 ORDER BY atespace, name LIMIT $2;

-- reseal_secret --
-- A secret sealed again by key $5, if it is still the value sealed by $3 (a concurrent change wins).
UPDATE secrets SET key_id = $5, sealed = $6
WHERE atespace = $1 AND name = $2 AND key_id = $3 AND sealed = $4
RETURNING name;

-- log_source_allowed --
-- Whether node $3 may add lines to actor ($1, $2): the actor is placed on one of its workers, or
-- the actor's newest stored line came from it (the lines a node still ships after the actor left).
SELECT EXISTS (
    SELECT 1 FROM actors a JOIN workers w ON w.id = a.worker_id
    WHERE a.atespace = $1 AND a.name = $2 AND w.node = $3
) OR (
    SELECT node FROM actor_log_lines WHERE atespace = $1 AND actor = $2 ORDER BY seq DESC LIMIT 1
) IS NOT DISTINCT FROM $3::text AND EXISTS (SELECT 1 FROM actors WHERE atespace = $1 AND name = $2);

-- lock_actor_log --
-- Serialize the appends to one actor's output (so `seq` follows commit order for that actor).
SELECT pg_advisory_xact_lock(hashtextextended('ate-actor-log/' || $1 || '/' || $2, 0));

-- insert_log_lines --
-- Append lines ($7 times, $8 byte offsets, $9 texts) to an actor's output, in offset order; a line
-- already stored from the same node, log and offset is skipped.
INSERT INTO actor_log_lines (atespace, actor, time, stream, node, worker, log_id, "offset", line)
SELECT $1, $2, u.t, $3, $4, $5, $6, u.o, u.l
FROM unnest($7::timestamptz[], $8::bigint[], $9::text[]) AS u(t, o, l)
ORDER BY u.o
ON CONFLICT DO NOTHING;

-- trim_log_lines --
-- Drop an actor's oldest lines beyond its newest $3 bytes (a line counts its text and its newline).
DELETE FROM actor_log_lines l
USING (
    SELECT seq FROM (
        SELECT seq, sum(octet_length(line) + 1) OVER (ORDER BY seq DESC) AS newer
        FROM actor_log_lines WHERE atespace = $1 AND actor = $2
    ) s WHERE s.newer > $3
) old
WHERE l.atespace = $1 AND l.actor = $2 AND l.seq = old.seq;

-- log_lines --
-- An actor's lines after seq $3 and at or after time $4 (NULL: any), the newest $5 of them, oldest first.
SELECT seq, time, stream, node, worker, line FROM (
    SELECT seq, time, stream, node, worker, line FROM actor_log_lines
    WHERE atespace = $1 AND actor = $2 AND seq > $3 AND ($4::timestamptz IS NULL OR time >= $4)
    ORDER BY seq DESC LIMIT $5
) newest ORDER BY seq;

-- log_events --
-- An actor's operations that finished at or after $3, the newest 1000 of them, oldest first: the
-- lifecycle events `ate logs` shows between the lines.
SELECT operation_id, operation, outcome, worker, reason, error, finished_at FROM (
    SELECT operation_id, operation, outcome, worker, reason, error, finished_at FROM operations
    WHERE atespace = $1 AND actor = $2 AND finished_at IS NOT NULL AND finished_at >= $3
    ORDER BY finished_at DESC, operation_id DESC LIMIT 1000
) newest ORDER BY finished_at, operation_id;

-- actor_has_run --
-- Whether an actor ever resumed (booted or restored) successfully, or printed a line.
SELECT EXISTS (
    SELECT 1 FROM operations WHERE atespace = $1 AND actor = $2 AND operation = 'ResumeActor' AND outcome = 'ok'
) OR EXISTS (SELECT 1 FROM actor_log_lines WHERE atespace = $1 AND actor = $2);

-- record_image_pull --
-- Node $1's latest look at its pull of image $2 ($3 state, $4 layers, $5 bytes total, $6 bytes
-- done, $7 message); nothing when the node is unknown.
INSERT INTO image_pulls (node, image, state, layers, bytes_total, bytes_done, message)
SELECT $1, $2, $3, $4, $5, $6, $7 WHERE EXISTS (SELECT 1 FROM nodes WHERE name = $1)
ON CONFLICT (node, image) DO UPDATE
SET state = EXCLUDED.state, layers = EXCLUDED.layers, bytes_total = EXCLUDED.bytes_total,
    bytes_done = EXCLUDED.bytes_done, message = EXCLUDED.message, updated_at = now()
RETURNING node;

-- image_pulls_of --
-- The nodes' latest looks at their pulls of the images $1 (text[]), newest first.
SELECT node, image, state, layers, bytes_total, bytes_done, message, updated_at FROM image_pulls
WHERE image = ANY($1::text[]) ORDER BY updated_at DESC, node;

-- snapshots_of_atespace --
-- The snapshots not yet collected of atespace $1's actors and templates ($2: only actor $2's, or
-- NULL; $4: only snapshot $4, or NULL), by owner then newest generation first, with what keeps
-- each ('fork NAME': another actor starts from it, sharing its files until its own first
-- suspend; 'retained': one of the last retained_generations(owner, $5), shown only when nothing
-- else keeps it); at most $3. What keeps a
-- snapshot is gathered once (one pass over actors, templates and tags), not per snapshot.
WITH kept AS (
    SELECT a.latest_snapshot_id AS id, 1 AS rank,
           CASE WHEN s.owner = 'actor/' || a.atespace || '/' || a.name THEN 'latest'
                WHEN a.atespace = $1 THEN 'fork ' || a.name ELSE 'fork ' || a.atespace || '/' || a.name END AS why
    FROM actors a JOIN snapshots s ON s.id = a.latest_snapshot_id
    UNION ALL SELECT local_snapshot_id, 2, 'paused' FROM actors WHERE local_snapshot_id IS NOT NULL
    UNION ALL SELECT pending_upload_snapshot_id, 3, 'awaiting upload' FROM actors WHERE pending_upload_snapshot_id IS NOT NULL
    UNION ALL SELECT in_progress_snapshot_id, 4, 'in progress' FROM actors WHERE in_progress_snapshot_id IS NOT NULL
    UNION ALL SELECT golden_snapshot_id, 5, 'golden' FROM actor_templates WHERE golden_snapshot_id IS NOT NULL
    UNION ALL SELECT snapshot_id, 6, 'tag ' || name FROM tags
    UNION ALL SELECT s.id, 7, 'retained' FROM snapshots s
        JOIN actors a ON a.atespace = $1 AND a.name = split_part(s.owner, '/', 3)
        WHERE split_part(s.owner, '/', 1) = 'actor' AND split_part(s.owner, '/', 2) = $1
          AND s.state = 'COMPLETED' AND s.deleted_at IS NULL
          AND (SELECT count(*) FROM snapshots n WHERE n.owner = s.owner AND n.generation > s.generation
                                                  AND n.state = 'COMPLETED' AND n.deleted_at IS NULL)
              < retained_generations(s.owner, $5)
), reasons AS (
    SELECT id, array_agg(why ORDER BY rank, why) AS ordered FROM (SELECT DISTINCT id, rank, why FROM kept) once
    GROUP BY id
)
SELECT s.id, s.owner, s.generation, s.scope, s.storage, s.state, s.uri, s.node, s.sandbox_class, s.manifest,
       s.size_bytes, s.created_at, s.completed_at,
       CASE WHEN cardinality(r.ordered) > 1 THEN array_remove(r.ordered, 'retained')
            ELSE COALESCE(r.ordered, '{}'::text[]) END AS kept_by
FROM snapshots s LEFT JOIN reasons r ON r.id = s.id
WHERE s.deleted_at IS NULL AND split_part(s.owner, '/', 2) = $1
  AND ($2::text IS NULL OR s.owner = 'actor/' || $1 || '/' || $2)
  AND ($4::bigint IS NULL OR s.id = $4)
ORDER BY s.owner, s.generation DESC
LIMIT $3;

-- prune_operations --
-- Finished operations finished before $1 (timestamptz), and those beyond the newest $2 finished
-- ones of each actor; at most $3 a run (the caller repeats while it deletes that many).
DELETE FROM operations WHERE operation_id IN (
    SELECT operation_id FROM (
        SELECT operation_id, finished_at,
               row_number() OVER (PARTITION BY atespace, actor ORDER BY started_at DESC) AS newest
        FROM operations WHERE finished_at IS NOT NULL
    ) ranked
    WHERE finished_at < $1 OR newest > $2
    LIMIT $3
);
