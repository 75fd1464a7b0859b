"""Revert, crash, node reconciliation, drain, tags, history and GC transitions on real Postgres.

Expected states follow ARCHITECTURE.md's state table: RUNNING|PAUSED|CRASHED|stuck
RESUMING/SUSPENDING --Revert--> SUSPENDED with the last COMPLETED snapshot; RUNNING --worker
lost--> CRASHED.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from activities.store import AlreadyExists, FailedPrecondition, Store
from domain.refs import ActorRef
from tests.activities.test_store import ready_template, worker


async def running_actor(store: Store, name: str = "a1", op: str = "r1") -> ActorRef:
    ref = ActorRef("demo", name)
    await store.create_actor(ref, "counter", {})
    await store.begin_resume(ref, op)
    await store.finish_resume(ref, op)
    return ref


async def suspend(store: Store, ref: ActorRef, op: str) -> int:
    plan = await store.begin_suspend(ref, op)
    assert plan.snapshot is not None
    await store.complete_suspend(ref, op, plan.snapshot.snapshot_id, {"files": []}, 1)
    return plan.snapshot.snapshot_id


@pytest.fixture
async def stage(store: Store) -> Store:
    await store.register_node("n1", "127.0.0.1:1", "v", [worker("w0"), worker("w1")])
    await ready_template(store)
    return store


async def test_revert_from_running_keeps_the_last_completed_snapshot(stage: Store) -> None:
    ref = await running_actor(stage)
    first = await suspend(stage, ref, "s1")
    await stage.begin_resume(ref, "r2")
    await stage.finish_resume(ref, "r2")
    pending = await stage.begin_suspend(ref, "s2")  # a suspend in flight: its snapshot is PENDING

    plan = await stage.begin_revert(ref, "v1")
    assert plan.from_state == "SUSPENDING" and plan.worker is not None and plan.node_alive
    again = await stage.begin_revert(ref, "v1")  # a retried activity
    assert again.from_state == "REVERTING"
    await stage.finish_revert(ref, "v1", "reverted from SUSPENDING")
    await stage.finish_revert(ref, "v1", "reverted from SUSPENDING")  # idempotent

    actor = await stage.get_actor(ref)
    assert (actor.state, actor.worker) == ("SUSPENDED", None)
    assert actor.latest_snapshot is not None and actor.latest_snapshot.snapshot_id == first
    assert pending.snapshot is not None
    async with stage.pool.acquire() as connection:
        assert (
            await connection.fetchval("SELECT count(*) FROM snapshots WHERE id = $1", pending.snapshot.snapshot_id) == 0
        )
        assert await connection.fetchval("SELECT count(*) FROM placements") == 0
    with pytest.raises(FailedPrecondition, match=r"actor demo/a1 is not in a revertable state \(state: SUSPENDED\)"):
        await stage.begin_revert(ref, "v2")
    history = await stage.actor_operations(ref)
    assert [(o.operation, o.outcome) for o in history] == [
        ("RevertActor", "ok"), ("SuspendActor", None), ("ResumeActor", "ok"), ("SuspendActor", "ok"),
        ("ResumeActor", "ok"),
    ]  # fmt: skip


async def test_sandbox_exit_crashes_a_running_actor_only(stage: Store) -> None:
    ref = await running_actor(stage)
    actor = await stage.get_actor(ref)
    assert actor.worker is not None
    assert not await stage.record_sandbox_exit("n1", "w0" if actor.worker.name == "w1" else "w1", ref, "x")
    assert await stage.record_sandbox_exit("n1", actor.worker.name, ref, "exit status 2")
    crashed = await stage.get_actor(ref)
    assert crashed.state == "CRASHED" and crashed.worker is None
    assert crashed.last_error == f"sandbox exited on worker {actor.worker.name} (n1): exit status 2"
    assert all(w.holders == [] for w in await stage.list_workers())  # its place is free
    # ...but the atelet still holds the exited sandbox: nothing is placed there until a heartbeat
    # has it stopped (the fencing order) and reports the worker idle
    states = {w.name: w.state for w in await stage.list_workers()}
    assert states[actor.worker.name] == "UNAVAILABLE"
    other = ActorRef("demo", "a2")
    await stage.create_actor(other, "counter", {})
    placed = await stage.begin_resume(other, "r-other")
    assert placed.worker is not None and placed.worker.name != actor.worker.name
    exited = {actor.worker.name: ("demo", "a1"), placed.worker.name: None}
    orders = await stage.register_node("n1", "127.0.0.1:1", "v", [worker("w0"), worker("w1")], exited)
    assert [(o.worker, o.name) for o in orders] == [(actor.worker.name, "a1")]
    idle = {actor.worker.name: None, placed.worker.name: None}
    await stage.register_node("n1", "127.0.0.1:1", "v", [worker("w0"), worker("w1")], idle)
    assert {w.name: w.state for w in await stage.list_workers()}[actor.worker.name] == "ACTIVE"
    plan = await stage.begin_revert(ref, "v1")
    assert (plan.from_state, plan.worker) == ("CRASHED", None)
    await stage.finish_revert(ref, "v1", "reverted from CRASHED")
    reverted = await stage.get_actor(ref)
    assert reverted.state == "SUSPENDED"
    assert reverted.last_error is not None and "exit status 2" in reverted.last_error  # the cause stays visible


async def test_reconcile_crashes_lost_sandboxes_and_fences_strays(stage: Store) -> None:
    ref = await running_actor(stage)
    actor = await stage.get_actor(ref)
    assert actor.worker is not None
    home, other = actor.worker.name, ("w0" if actor.worker.name == "w1" else "w1")
    # a fresh actor is not crashed by a heartbeat taken before it was running
    orders = await stage.reconcile_node("n1", {home: None, other: None})
    assert orders == [] and (await stage.get_actor(ref)).state == "RUNNING"
    async with stage.pool.acquire() as connection:
        await connection.execute("UPDATE actors SET updated_at = now() - interval '1 minute'")
    # the atelet runs a stray sandbox on the other worker and lost the actor's
    orders = await stage.reconcile_node("n1", {home: None, other: ("demo", "ghost")})
    assert [(o.worker, o.atespace, o.name) for o in orders] == [(other, "demo", "ghost")]
    crashed = await stage.get_actor(ref)
    assert crashed.state == "CRASHED" and crashed.last_error is not None and "sandbox not found" in crashed.last_error
    states = {w.name: (w.state, w.holders) for w in await stage.list_workers()}
    assert states == {home: ("ACTIVE", []), other: ("UNAVAILABLE", [])}
    # once the stray is gone, the next heartbeat makes the worker ACTIVE again
    await stage.register_node("n1", "127.0.0.1:1", "v", [worker("w0"), worker("w1")], {"w0": None, "w1": None})
    assert {w.state for w in await stage.list_workers()} == {"ACTIVE"}


async def test_lost_node_crashes_running_actors(stage: Store) -> None:
    ref = await running_actor(stage)
    assert await stage.mark_lost_nodes() == []
    async with stage.pool.acquire() as connection:
        await connection.execute("UPDATE nodes SET last_heartbeat = now() - interval '1 minute'")
    assert await stage.mark_lost_nodes() == ["n1"]
    assert await stage.mark_lost_nodes() == []  # once
    actor = await stage.get_actor(ref)
    assert actor.state == "CRASHED" and actor.last_error is not None and "node n1 sent no heartbeat" in actor.last_error
    assert {(w.state, tuple(w.holders)) for w in await stage.list_workers()} == {("UNAVAILABLE", ())}
    plan = await stage.begin_revert(ref, "v")
    assert plan.worker is None  # nothing left to terminate: the revert needs no dead node


async def test_drain_lists_actors_and_blocks_placement(stage: Store) -> None:
    ref = await running_actor(stage)
    plan = await stage.begin_drain("n1", datetime.now(UTC) + timedelta(minutes=30))
    assert (plan.running, plan.other) == ([ref], [])
    idle = ActorRef("demo", "idle")
    await stage.create_actor(idle, "counter", {})
    with pytest.raises(Exception, match="none of the 2 workers is ACTIVE"):
        await stage.begin_resume(idle, "r-idle")
    await stage.register_node("n1", "127.0.0.1:1", "v", [worker("w0"), worker("w1")], {"w0": None, "w1": None})
    assert {w.state for w in await stage.list_workers()} == {"UNAVAILABLE"}  # a heartbeat does not undo a drain
    [(left, bound)] = await stage.drain_leftovers("n1")
    assert left == ref
    await stage.crash_after_deadline(ref, bound.worker_id, "eviction deadline passed")
    assert (await stage.get_actor(ref)).state == "CRASHED"
    assert await stage.drain_leftovers("n1") == []
    await stage.end_drain("n1")
    assert {w.state for w in await stage.list_workers()} == {"ACTIVE"}


async def test_tag_round_trip(stage: Store) -> None:
    ref = await running_actor(stage)
    with pytest.raises(FailedPrecondition, match="no completed snapshot to tag yet"):
        await stage.create_tag(ref, "v1")
    snapshot_id = await suspend(stage, ref, "s1")
    tag = await stage.create_tag(ref, "v1")
    assert (tag.snapshot_id, tag.source_actor, tag.generation, tag.template) == (snapshot_id, "a1", 1, "counter")
    with pytest.raises(AlreadyExists):
        await stage.create_tag(ref, "v1")
    clone = ActorRef("demo", "clone")
    await stage.create_actor(clone, "counter", {})
    await stage.use_snapshot_of_tag(clone, tag)
    plan = await stage.begin_resume(clone, "rc")
    assert plan.snapshot is not None and plan.snapshot.snapshot_id == snapshot_id


async def test_gc_collects_superseded_and_orphaned_snapshots_only(stage: Store) -> None:
    ref = await running_actor(stage)
    gen1 = await suspend(stage, ref, "s1")
    await stage.create_tag(ref, "keep")  # a tag keeps generation 1 alive
    await stage.begin_resume(ref, "r2")
    await stage.finish_resume(ref, "r2")
    gen2 = await suspend(stage, ref, "s2")
    await stage.begin_resume(ref, "r3")
    await stage.finish_resume(ref, "r3")
    gen3 = await suspend(stage, ref, "s3")
    garbage = {g.snapshot_id for g in await stage.garbage_snapshots(100, 0)}
    assert garbage == {gen2}  # gen1 tagged, gen3 latest, golden in use
    await stage.delete_actor(ref)
    garbage = {g.snapshot_id for g in await stage.garbage_snapshots(100, 0)}
    assert garbage == {gen2, gen3}  # the tag still holds gen1
    assert await stage.garbage_snapshots(100, 3600) == []  # nothing is an hour old
    for snapshot_id in garbage:
        await stage.forget_snapshot(snapshot_id)
    assert await stage.garbage_snapshots(100, 0) == []
    assert gen1 not in garbage


async def test_an_operation_knows_whether_it_still_holds_its_actor(stage: Store) -> None:
    ref = await running_actor(stage, op="r1")
    actor = await stage.get_actor(ref)
    assert actor.worker is not None
    worker_id = actor.worker.worker_id
    assert await stage.placement_held(ref.workflow_id, worker_id, "r1")  # the resume that bound it
    await stage.begin_suspend(ref, "s1")
    assert await stage.placement_held(ref.workflow_id, worker_id, "s1")  # the suspend now acting on it
    assert not await stage.placement_held(ref.workflow_id, worker_id, "stale")
    await stage.begin_revert(ref, "v1")
    await stage.finish_revert(ref, "v1", "test")
    assert not await stage.placement_held(ref.workflow_id, worker_id, "r1")  # reverted: nobody holds it
    assert not await stage.placement_held(ref.workflow_id, worker_id, "s1")
