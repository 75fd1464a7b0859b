"""The operations history stays bounded (issue 30; api/history_retention.py on the real store):
finished operations older than the age, and those past each actor's newest N, go; a running one
stays whatever its age, and another actor's history is its own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from api.history_retention import prune_once
from store import Store

NOW = datetime.now(UTC)


async def test_old_and_surplus_operations_go_running_ones_stay(api_store: Store) -> None:
    rows = [  # (operation id, actor, started days ago, finished?)
        ("old", "a1", 40, True), ("running-old", "a1", 40, False),
        ("r1", "a1", 4, True), ("r2", "a1", 3, True), ("r3", "a1", 2, True), ("r4", "a1", 1, True),
        ("b1", "b1", 2, True), ("b2", "b1", 1, True),
    ]  # fmt: skip
    for operation_id, actor, days, finished in rows:
        started = NOW - timedelta(days=days)
        await api_store.pool.execute(
            "INSERT INTO operations (operation_id, atespace, actor, operation, outcome, started_at, finished_at) "
            "VALUES ($1, 'hist', $2, 'ResumeActor', $3, $4, $5)",
            operation_id, actor, "ok" if finished else None, started, started + timedelta(seconds=1) if finished else None,
        )  # fmt: skip
    assert await prune_once(api_store, days=30, per_actor=3) == 2  # "old" by age, "r1" past a1's newest 3
    left = {r["operation_id"] for r in await api_store.pool.fetch("SELECT operation_id FROM operations "
                                                                   "WHERE atespace = 'hist'")}  # fmt: skip
    assert left == {"running-old", "r2", "r3", "r4", "b1", "b2"}
    assert await prune_once(api_store, days=30, per_actor=3) == 0  # nothing more: it is bounded
