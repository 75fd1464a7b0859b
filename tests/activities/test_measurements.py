"""The benchmarks' readings and staging (store/measurements.py) on a real store: every query of
measurements.sql runs, and answers what the benchmarks read."""

from __future__ import annotations

import pytest

from domain.refs import ActorRef
from store import Store
from tests.activities.test_store import ready_template, worker


async def test_the_snapshots_a_benchmark_restores_by_hand(store: Store) -> None:
    await store.nodes.register("n1", "127.0.0.1:1", "v", [worker("w1")])
    await ready_template(store)
    golden_uri, spec = await store.measurements.golden_snapshot("demo", "counter")
    assert golden_uri.startswith("file:///snap/demo/templates/counter/1-")
    assert spec["containers"][0]["name"]
    ref = ActorRef("demo", "a1")
    await store.actors.create(ref, "counter", {})
    with pytest.raises(LookupError, match="actor demo/a1 has no latest snapshot"):
        await store.measurements.latest_snapshot("demo", "a1")
    await store.resumes.begin(ref, "r1")
    await store.resumes.finish(ref, "r1")
    plan = await store.suspends.begin(ref, "s1")
    assert plan.snapshot is not None
    await store.suspends.complete(ref, "s1", plan.snapshot.snapshot_id, {"files": ["a"]}, 10)
    uri, manifest, same_spec = await store.measurements.latest_snapshot("demo", "a1")
    assert (uri, manifest, same_spec) == (plan.snapshot.uri, {"files": ["a"]}, spec)


async def test_bulk_actors_sizes_and_a_query_with_its_candidate(store: Store) -> None:
    await store.nodes.register("n1", "127.0.0.1:1", "v", [worker("w1")])
    await ready_template(store)
    db = store.measurements
    assert await db.insert_actors("demo", "counter", 0, 300) == 300
    assert (await store.actors.get(ActorRef("demo", "s00000299"))).state == "SUSPENDED"
    assert await db.actor_count() == 300
    rows, heap, indexes = await db.actors_table()
    assert rows == 300 and heap > 0 and indexes > 0
    sizes = await db.table_sizes()
    assert set(sizes) == {"actors", "snapshots", "operations", "placements", "workers", "actor_templates"}
    assert sizes["actors"]["rows"] == 300 and sizes["actors"]["bytes"] > 0 and sizes["actors"]["tuple_bytes"] > 0
    assert await db.database_bytes() > 0
    for candidate in (False, True):
        seconds, count = await db.time_list_actors(candidate, None, "demo", "s00000100", 101, None)
        assert count == 101 and seconds >= 0
    plan = await db.explain_list_actors(None, "demo", "s00000100", 101, None)
    assert any("Execution Time" in line for line in plan)
    await db.delete_never_resumed_actors()
    assert await db.actor_count() == 0


async def test_hollow_nodes_are_kept_alive_counted_and_deleted(store: Store) -> None:
    await store.nodes.register("hollow-00001", "127.0.0.1:1", "hollow", [worker("w1"), worker("w2")])
    await store.nodes.register("real", "127.0.0.2:1", "v", [worker("w3")])
    db = store.measurements
    await db.heartbeat_nodes("hollow-")
    assert await db.worker_counts() == (3, 3)
    await db.delete_nodes("hollow-")
    assert await db.worker_counts() == (1, 1)
    assert not await store.nodes.exists("hollow-00001")
    assert await store.nodes.exists("real")
