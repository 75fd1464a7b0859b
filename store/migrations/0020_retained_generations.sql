-- Snapshot retention (issue 30): how many COMPLETED generations of an owner the snapshot collector
-- keeps, in one place for the collector and the listing. An actor's: its template's
-- snapshotConfig.retainGenerations, else `fallback` (a template stored before the setting, or
-- gone); a template's own (golden) snapshots: 1. A snapshot the collector has claimed has
-- deleted_at set (its data is being deleted; nothing may refer to it again).
CREATE FUNCTION retained_generations(owner text, fallback integer) RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN split_part(owner, '/', 1) = 'actor' THEN COALESCE((
        SELECT (t.spec -> 'snapshotConfig' ->> 'retainGenerations')::integer
        FROM actors a JOIN actor_templates t ON t.atespace = a.atespace AND t.name = a.template
        WHERE a.atespace = split_part(owner, '/', 2) AND a.name = split_part(owner, '/', 3)
    ), fallback) ELSE 1 END
$$;
