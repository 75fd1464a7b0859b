"""Revert, crash, node reconciliation, drain, tags, history and GC transitions on real Postgres.

Expected states follow ARCHITECTURE.md's state table: RUNNING|PAUSED|CRASHED|stuck
RESUMING/SUSPENDING --Revert--> SUSPENDED with the last COMPLETED snapshot; RUNNING --sandbox
lost--> CRASHED (a lost node: tests/activities/test_node_loss.py).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from domain.refs import ActorRef
from store import AlreadyExists, FailedPrecondition, Store
from tests.activities.test_store import ready_template, worker


async def running_actor(store: Store, name: str = "a1", op: str = "r1") -> ActorRef:
    ref = ActorRef("demo", name)
    await store.actors.create(ref, "counter", {})
    await store.resumes.begin(ref, op)
    await store.resumes.finish(ref, op)
    return ref


async def suspend(store: Store, ref: ActorRef, op: str) -> int:
    plan = await store.suspends.begin(ref, op)
    assert plan.snapshot is not None
    await store.suspends.complete(ref, op, plan.snapshot.snapshot_id, {"files": []}, 1)
    return plan.snapshot.snapshot_id


@pytest.fixture
async def stage(store: Store) -> Store:
    await store.nodes.register("n1", "127.0.0.1:1", "v", [worker("w0"), worker("w1")])
    await ready_template(store)
    return store


async def test_revert_from_running_keeps_the_last_completed_snapshot(stage: Store) -> None:
    ref = await running_actor(stage)
    first = await suspend(stage, ref, "s1")
    await stage.resumes.begin(ref, "r2")
    await stage.resumes.finish(ref, "r2")
    pending = await stage.suspends.begin(ref, "s2")  # a suspend in flight: its snapshot is PENDING

    plan = await stage.reverts.begin(ref, "v1")
    assert plan.from_state == "SUSPENDING" and plan.worker is not None and plan.node_alive
    again = await stage.reverts.begin(ref, "v1")  # a retried activity
    assert again.from_state == "REVERTING"
    await stage.reverts.finish(ref, "v1", "reverted from SUSPENDING")
    await stage.reverts.finish(ref, "v1", "reverted from SUSPENDING")  # idempotent

    actor = await stage.actors.get(ref)
    assert (actor.state, actor.worker) == ("SUSPENDED", None)
    assert actor.latest_snapshot is not None and actor.latest_snapshot.snapshot_id == first
    assert pending.snapshot is not None
    async with stage.pool.acquire() as connection:
        assert (
            await connection.fetchval("SELECT count(*) FROM snapshots WHERE id = $1", pending.snapshot.snapshot_id) == 0
        )
        assert await connection.fetchval("SELECT count(*) FROM placements") == 0
    with pytest.raises(FailedPrecondition, match=r"actor demo/a1 is not in a revertable state \(state: SUSPENDED\)"):
        await stage.reverts.begin(ref, "v2")
    history = await stage.history.of_actor(ref)
    # The suspend the revert took over ends with it (it showed `running` for ever: chaos run).
    assert [(o.operation, o.outcome) for o in history] == [
        ("RevertActor", "ok"), ("SuspendActor", "superseded"), ("ResumeActor", "ok"), ("SuspendActor", "ok"),
        ("ResumeActor", "ok"),
    ]  # fmt: skip
    assert history[1].error == "a revert took over (operation v1)" and history[1].finished_at is not None


async def test_sandbox_exit_crashes_a_running_actor_only(stage: Store) -> None:
    ref = await running_actor(stage)
    actor = await stage.actors.get(ref)
    assert actor.worker is not None
    assert not await stage.nodes.record_sandbox_exit("n1", "w0" if actor.worker.name == "w1" else "w1", ref, "x")
    assert await stage.nodes.record_sandbox_exit("n1", actor.worker.name, ref, "exit status 2")
    crashed = await stage.actors.get(ref)
    assert crashed.state == "CRASHED" and crashed.worker is None
    assert crashed.last_error == f"sandbox exited on worker {actor.worker.name} (n1): exit status 2"
    assert all(w.holders == [] for w in await stage.nodes.list_workers())  # its place is free
    # ...but the atelet still holds the exited sandbox: nothing is placed there until a heartbeat
    # has it stopped (the fencing order) and reports the worker idle
    states = {w.name: w.state for w in await stage.nodes.list_workers()}
    assert states[actor.worker.name] == "UNAVAILABLE"
    other = ActorRef("demo", "a2")
    await stage.actors.create(other, "counter", {})
    placed = await stage.resumes.begin(other, "r-other")
    assert placed.worker is not None and placed.worker.name != actor.worker.name
    exited = {actor.worker.name: ("demo", "a1"), placed.worker.name: None}
    orders = await stage.nodes.register("n1", "127.0.0.1:1", "v", [worker("w0"), worker("w1")], exited)
    assert [(o.worker, o.name) for o in orders] == [(actor.worker.name, "a1")]
    idle = {actor.worker.name: None, placed.worker.name: None}
    await stage.nodes.register("n1", "127.0.0.1:1", "v", [worker("w0"), worker("w1")], idle)
    assert {w.name: w.state for w in await stage.nodes.list_workers()}[actor.worker.name] == "ACTIVE"
    plan = await stage.reverts.begin(ref, "v1")
    assert (plan.from_state, plan.worker) == ("CRASHED", None)
    await stage.reverts.finish(ref, "v1", "reverted from CRASHED")
    reverted = await stage.actors.get(ref)
    assert reverted.state == "SUSPENDED"
    assert reverted.last_error is not None and "exit status 2" in reverted.last_error  # the cause stays visible


async def test_reconcile_crashes_lost_sandboxes_and_fences_strays(stage: Store) -> None:
    ref = await running_actor(stage)
    actor = await stage.actors.get(ref)
    assert actor.worker is not None
    home, other = actor.worker.name, ("w0" if actor.worker.name == "w1" else "w1")
    # a fresh actor is not crashed by a heartbeat taken before it was running
    orders = await stage.nodes.reconcile("n1", {home: None, other: None})
    assert orders == [] and (await stage.actors.get(ref)).state == "RUNNING"
    async with stage.pool.acquire() as connection:
        await connection.execute("UPDATE actors SET updated_at = now() - interval '1 minute'")
    # the atelet runs a stray sandbox on the other worker and lost the actor's
    orders = await stage.nodes.reconcile("n1", {home: None, other: ("demo", "ghost")})
    assert [(o.worker, o.atespace, o.name) for o in orders] == [(other, "demo", "ghost")]
    crashed = await stage.actors.get(ref)
    assert crashed.state == "CRASHED" and crashed.last_error is not None and "sandbox not found" in crashed.last_error
    states = {w.name: (w.state, w.holders) for w in await stage.nodes.list_workers()}
    assert states == {home: ("ACTIVE", []), other: ("UNAVAILABLE", [])}
    # once the stray is gone, the next heartbeat makes the worker ACTIVE again
    await stage.nodes.register("n1", "127.0.0.1:1", "v", [worker("w0"), worker("w1")], {"w0": None, "w1": None})
    assert {w.state for w in await stage.nodes.list_workers()} == {"ACTIVE"}


async def test_drain_lists_actors_and_blocks_placement(stage: Store) -> None:
    ref = await running_actor(stage)
    plan = await stage.drains.begin("n1", datetime.now(UTC) + timedelta(minutes=30))
    assert (plan.running, plan.other) == ([ref], [])
    idle = ActorRef("demo", "idle")
    await stage.actors.create(idle, "counter", {})
    with pytest.raises(Exception) as refused:
        await stage.resumes.begin(idle, "r-idle")
    # The refusal says why the workers are out and how to take them back (the chaos run's complaint).
    assert str(refused.value) == (
        "no worker has room for the actor demo/idle: 2 workers: 2 UNAVAILABLE (node n1 is draining; "
        "`ate undrain node n1` takes it back)"
    )
    await stage.nodes.register("n1", "127.0.0.1:1", "v", [worker("w0"), worker("w1")], {"w0": None, "w1": None})
    assert {w.state for w in await stage.nodes.list_workers()} == {"UNAVAILABLE"}  # a heartbeat does not undo a drain
    [(left, bound)] = await stage.drains.leftovers("n1")
    assert left == ref
    await stage.drains.crash_after_deadline(ref, bound.worker_id, "eviction deadline passed")
    assert (await stage.actors.get(ref)).state == "CRASHED"
    assert await stage.drains.leftovers("n1") == []
    await stage.drains.end("n1")
    assert {w.state for w in await stage.nodes.list_workers()} == {"ACTIVE"}


async def test_tag_round_trip(stage: Store) -> None:
    ref = await running_actor(stage)
    with pytest.raises(FailedPrecondition, match="no completed snapshot to tag yet"):
        await stage.tags.create(ref, "v1")
    snapshot_id = await suspend(stage, ref, "s1")
    tag = await stage.tags.create(ref, "v1")
    assert (tag.snapshot_id, tag.source_actor, tag.generation, tag.template) == (snapshot_id, "a1", 1, "counter")
    with pytest.raises(AlreadyExists):
        await stage.tags.create(ref, "v1")
    clone = ActorRef("demo", "clone")
    await stage.actors.create(clone, "counter", {})
    await stage.tags.start_from(clone, tag)
    plan = await stage.resumes.begin(clone, "rc")
    assert plan.snapshot is not None and plan.snapshot.snapshot_id == snapshot_id


async def test_gc_collects_superseded_and_orphaned_snapshots_only(stage: Store) -> None:
    ref = await running_actor(stage)
    gen1 = await suspend(stage, ref, "s1")
    await stage.tags.create(ref, "keep")  # a tag keeps generation 1 alive
    gens = [gen1]
    for n in (2, 3, 4):
        await stage.resumes.begin(ref, f"r{n}")
        await stage.resumes.finish(ref, f"r{n}")
        gens.append(await suspend(stage, ref, f"s{n}"))
    _, gen2, gen3, gen4 = gens
    assert await stage.snapshots.garbage(100, 3600) == []  # nothing is an hour old
    garbage = {g.snapshot_id for g in await stage.snapshots.garbage(100, 0)}
    # the template keeps 2 generations (the default): gen4 (latest) and gen3; gen1 is tagged
    assert garbage == {gen2}
    await stage.actors.delete(ref)
    garbage = {g.snapshot_id for g in await stage.snapshots.garbage(100, 0)}
    assert garbage == {gen2, gen3, gen4}  # the tag still holds gen1
    # claimed snapshots come back until their deletion is done, whatever their age
    assert {g.snapshot_id for g in await stage.snapshots.garbage(100, 3600)} == garbage
    for snapshot_id in garbage:
        await stage.snapshots.forget(snapshot_id)
    assert await stage.snapshots.garbage(100, 0) == []
    assert gen1 not in garbage


async def test_an_operation_knows_whether_it_still_holds_its_actor(stage: Store) -> None:
    ref = await running_actor(stage, op="r1")
    actor = await stage.actors.get(ref)
    assert actor.worker is not None
    worker_id = actor.worker.worker_id
    assert await stage.placement.held(ref.workflow_id, worker_id, "r1")  # the resume that bound it
    await stage.suspends.begin(ref, "s1")
    assert await stage.placement.held(ref.workflow_id, worker_id, "s1")  # the suspend now acting on it
    assert not await stage.placement.held(ref.workflow_id, worker_id, "stale")
    await stage.reverts.begin(ref, "v1")
    await stage.reverts.finish(ref, "v1", "test")
    assert not await stage.placement.held(ref.workflow_id, worker_id, "r1")  # reverted: nobody holds it
    assert not await stage.placement.held(ref.workflow_id, worker_id, "s1")
