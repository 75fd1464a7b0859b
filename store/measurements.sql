-- The benchmarks' queries (bench/): what they read and stage in a stack's database beside the
-- REST API. No process of ate runs these; store/measurements.py does, for bench/ only.

-- latest_snapshot_of_actor --
-- An actor's latest snapshot (URI, manifest) and its template's spec, to restore it by hand.
SELECT s.uri, s.manifest, t.spec
FROM actors a
JOIN snapshots s ON s.id = a.latest_snapshot_id
JOIN actor_templates t ON t.atespace = a.atespace AND t.name = a.template
WHERE a.atespace = $1 AND a.name = $2;

-- golden_snapshot_of_template --
-- A template's golden snapshot URI and its spec, to restore it by hand.
SELECT s.uri, t.spec
FROM actor_templates t
JOIN snapshots s ON s.id = t.golden_snapshot_id
WHERE t.atespace = $1 AND t.name = $2;

-- per_actor_table_sizes --
-- Rows, total bytes (heap, indexes, TOAST) and mean row bytes of the tables that grow with actors.
SELECT 'actors' AS name, count(*) AS rows, pg_total_relation_size('actors') AS bytes,
       coalesce(avg(pg_column_size(x.*)), 0)::float8 AS tuple_bytes FROM actors x
UNION ALL
SELECT 'snapshots', count(*), pg_total_relation_size('snapshots'), coalesce(avg(pg_column_size(x.*)), 0)::float8
FROM snapshots x
UNION ALL
SELECT 'operations', count(*), pg_total_relation_size('operations'), coalesce(avg(pg_column_size(x.*)), 0)::float8
FROM operations x
UNION ALL
SELECT 'placements', count(*), pg_total_relation_size('placements'), coalesce(avg(pg_column_size(x.*)), 0)::float8
FROM placements x
UNION ALL
SELECT 'workers', count(*), pg_total_relation_size('workers'), coalesce(avg(pg_column_size(x.*)), 0)::float8
FROM workers x
UNION ALL
SELECT 'actor_templates', count(*), pg_total_relation_size('actor_templates'),
       coalesce(avg(pg_column_size(x.*)), 0)::float8
FROM actor_templates x;

-- database_size --
-- The whole database's bytes.
SELECT pg_database_size(current_database());

-- actors_table_size --
-- The actors table's rows, heap bytes and index bytes.
SELECT count(*) AS rows, pg_table_size('actors') AS heap, pg_indexes_size('actors') AS indexes FROM actors;

-- insert_bulk_actors --
-- Actors s<start>..s<end - 1> (8-digit numbers) of one template in one atespace, SUSPENDED and
-- never resumed (run with triggers off: session_replication_role = replica).
INSERT INTO actors (atespace, name, template)
SELECT $1, 's' || lpad(g::text, 8, '0'), $2 FROM generate_series($3::int, $4::int - 1) g;

-- count_actors --
-- Every actor row.
SELECT count(*) FROM actors;

-- delete_never_resumed_actors --
-- Drop the bulk rows: SUSPENDED actors without a snapshot (run with triggers off).
DELETE FROM actors WHERE latest_snapshot_id IS NULL AND state = 'SUSPENDED';

-- heartbeat_nodes_named --
-- A heartbeat for every node whose name starts with $1 (no NOTIFY: a node update announces nothing).
UPDATE nodes SET last_heartbeat = now() WHERE name LIKE $1 || '%';

-- delete_workers_of_nodes_named --
-- Delete the workers of the nodes whose name starts with $1 (announced: worker views drop them).
DELETE FROM workers WHERE node LIKE $1 || '%';

-- delete_nodes_named --
-- Delete the nodes whose name starts with $1 (after their workers).
DELETE FROM nodes WHERE name LIKE $1 || '%';

-- count_workers --
-- Workers, and ACTIVE workers, as the table says.
SELECT count(*) AS total, count(*) FILTER (WHERE state = 'ACTIVE') AS active FROM workers;

-- list_actors_candidate --
-- A candidate of queries.sql's list_actors for bench/scale.py to time beside it (same rows, same
-- parameters): the page cut from the primary-key index before the joins.
WITH page AS (
    SELECT * FROM actors a
    WHERE ($1::text[] IS NULL OR a.atespace = ANY($1)) AND ($5::text IS NULL OR a.state = $5)
      AND (a.atespace, a.name) > ($2, $3)
    ORDER BY a.atespace, a.name LIMIT $4
)
SELECT a.atespace, a.name, a.template, a.state, a.version, a.worker_selector, a.operation,
       a.operation_id, a.last_error, a.created_at, a.updated_at,
       w.id AS worker_id, w.pool AS worker_pool, w.name AS worker_name, w.node AS worker_node,
       w.ip AS worker_ip, NULL::text AS atelet_address,
       s.id AS snapshot_id, s.generation AS snapshot_generation, s.scope AS snapshot_scope,
       s.uri AS snapshot_uri, s.state AS snapshot_state, NULL::jsonb AS snapshot_manifest
FROM page a
LEFT JOIN workers w ON w.id = a.worker_id
LEFT JOIN snapshots s ON s.id = a.latest_snapshot_id
ORDER BY a.atespace, a.name;
