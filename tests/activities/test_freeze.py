"""FROZEN on a real PostgreSQL: the freeze, its rollback, the thaw of a resume, and what the other
operations and node loss do to a frozen actor.

Expected values come from ARCHITECTURE.md's state table: RUNNING --Freeze--> FROZEN (it keeps its
worker and its place); FROZEN --request / Resume--> RUNNING on the same worker (a thaw: no
placement, no snapshot restored); FROZEN --Suspend / Pause--> SUSPENDING / PAUSING; FROZEN is
revertable; a silent node makes a FROZEN actor UNREACHABLE, and its return makes it FROZEN again
(its sandbox is still stopped there).
"""

from __future__ import annotations

import pytest

from domain.refs import ActorRef
from store import FailedPrecondition, NotFound, Store
from tests.activities.conftest import ONE_NODE_WORKERS as WORKERS
from tests.activities.test_lifecycle import running_actor
from tests.activities.test_node_loss import placements, silence


async def frozen_actor(store: Store, name: str = "a1", op: str = "f1") -> tuple[ActorRef, str]:
    ref = await running_actor(store, name, f"r-{name}")
    plan = await store.freezes.begin(ref, op)
    assert plan.worker is not None and not plan.already_frozen
    await store.freezes.finish(ref, op)
    return ref, plan.worker.name


async def history(store: Store, ref: ActorRef) -> list[tuple[str, str | None, str | None]]:
    return [(o.operation, o.outcome, o.error) for o in await store.history.of_actor(ref)]


async def reason_of(store: Store, operation_id: str) -> str | None:
    return await store.pool.fetchval("SELECT reason FROM operations WHERE operation_id = $1", operation_id)


async def test_a_freeze_keeps_the_worker_and_the_place(stage: Store) -> None:
    ref = await running_actor(stage)
    home = (await stage.actors.get(ref)).worker
    assert home is not None
    plan = await stage.freezes.begin(ref, "f1", "idle for 20 s")
    assert plan.worker is not None and plan.worker.name == home.name
    during = await stage.actors.get(ref)
    assert (during.state, during.operation) == ("FROZEN", "FreezeActor")  # written before the sandbox stops
    assert (await stage.freezes.begin(ref, "f1")).worker == plan.worker  # a retry finds its own mark
    await stage.freezes.finish(ref, "f1")
    await stage.freezes.finish(ref, "f1")  # idempotent
    actor = await stage.actors.get(ref)
    assert (actor.state, actor.operation) == ("FROZEN", None)
    assert actor.worker is not None and actor.worker.name == home.name
    assert await placements(stage) == {ref.workflow_id: home.name}
    assert (await history(stage, ref))[0] == ("FreezeActor", "ok", None)
    assert await reason_of(stage, "f1") == "idle for 20 s"
    assert (await stage.freezes.begin(ref, "f2")).already_frozen  # resting FROZEN: nothing to do


async def test_only_a_running_actor_is_frozen(stage: Store) -> None:
    ref = ActorRef("demo", "a1")
    await stage.actors.create(ref, "counter", {})
    with pytest.raises(FailedPrecondition) as refused:
        await stage.freezes.begin(ref, "f1")
    assert refused.value.message == "actor demo/a1 cannot be frozen from state SUSPENDED (FreezeActor wants RUNNING)"
    with pytest.raises(NotFound):
        await stage.freezes.begin(ActorRef("demo", "nope"), "f1")


async def test_a_freeze_that_gives_way_leaves_the_actor_running(stage: Store) -> None:
    ref = await running_actor(stage)
    await stage.freezes.begin(ref, "f1", "idle for 20 s")
    await stage.freezes.rollback(ref, "f1", None)
    actor = await stage.actors.get(ref)
    assert (actor.state, actor.operation, actor.last_error) == ("RUNNING", None, None)
    assert (await history(stage, ref))[0] == ("FreezeActor", "abandoned", "a request came in: the actor keeps running")


async def test_a_freeze_the_atelet_refused_is_recorded_failed(stage: Store) -> None:
    ref = await running_actor(stage)
    await stage.freezes.begin(ref, "f1")
    await stage.freezes.rollback(ref, "f1", "worker w0 runs no sandbox")
    actor = await stage.actors.get(ref)
    assert (actor.state, actor.last_error) == ("RUNNING", "worker w0 runs no sandbox")
    assert (await history(stage, ref))[0] == ("FreezeActor", "failed", "worker w0 runs no sandbox")


async def test_a_resume_of_a_frozen_actor_thaws_it_in_place(stage: Store) -> None:
    ref, home = await frozen_actor(stage)
    plan = await stage.resumes.begin(ref, "r2")
    assert plan.thaw and plan.snapshot is None  # no snapshot restored
    assert plan.worker is not None and plan.worker.name == home  # no placement: the same worker
    assert (await stage.actors.get(ref)).state == "RESUMING"
    again = await stage.resumes.begin(ref, "r2")  # a retry of the same resume thaws again
    assert again.thaw and again.worker == plan.worker
    assert await stage.placement.held(ref.workflow_id, plan.worker.worker_id, "r2")  # its place passed to it
    await stage.resumes.finish(ref, "r2")
    actor = await stage.actors.get(ref)
    assert actor.state == "RUNNING" and actor.worker is not None and actor.worker.name == home
    assert await placements(stage) == {ref.workflow_id: home}


async def test_a_frozen_actor_is_suspended_paused_and_reverted_like_a_running_one(stage: Store) -> None:
    ref, home = await frozen_actor(stage)
    plan = await stage.suspends.begin(ref, "s2", reason="idle for 600 s")
    assert plan.worker is not None and plan.worker.name == home  # its sandbox is checkpointed there
    assert (await stage.actors.get(ref)).state == "SUSPENDING"
    assert await reason_of(stage, "s2") == "idle for 600 s"

    ref2, _ = await frozen_actor(stage, "b1", "fb")  # on the other worker
    paused = await stage.pauses.begin(ref2, "pb", "idle for 60 s")
    assert paused.worker is not None and (await stage.actors.get(ref2)).state == "PAUSING"
    assert await reason_of(stage, "pb") == "idle for 60 s"
    assert paused.snapshot is not None
    await stage.suspends.rollback(ref2, "pb", paused.snapshot.snapshot_id, "disk full")
    # Back to FROZEN, not RUNNING: only the checkpoint itself thaws the sandbox, and a failure may
    # come before it (FROZEN is safe either way: the next resume's thaw is a no-op on a running one).
    assert (await stage.actors.get(ref2)).state == "FROZEN"


async def test_a_silent_node_makes_a_frozen_actor_unreachable_and_its_return_frozen_again(stage: Store) -> None:
    ref, home = await frozen_actor(stage)
    other = "w0" if home == "w1" else "w1"
    await silence(stage, "n1", 5)
    assert await stage.liveness.mark_lost(lease_seconds=4, grace_seconds=60) == ["n1"]
    assert (await stage.actors.get(ref)).state == "UNREACHABLE"
    orders = await stage.nodes.register("n1", "127.0.0.1:1", "v", WORKERS, {home: ("demo", "a1"), other: None})
    assert orders == []
    actor = await stage.actors.get(ref)
    assert actor.state == "FROZEN"  # its sandbox is still stopped there: not RUNNING
    assert actor.worker is not None and actor.worker.name == home


async def test_a_frozen_actor_whose_node_lost_its_sandbox_is_crashed(stage: Store) -> None:
    # RUNNING, FROZEN --its sandbox exited (the node restarted without it)--> CRASHED
    ref, home = await frozen_actor(stage)
    other = "w0" if home == "w1" else "w1"
    await stage.pool.execute("UPDATE actors SET updated_at = now() - interval '1 minute'")  # settled
    await stage.nodes.register("n1", "127.0.0.1:1", "v", WORKERS, {home: None, other: None})
    actor = await stage.actors.get(ref)
    assert actor.state == "CRASHED" and actor.worker is None
    assert f"sandbox not found on worker {home} (n1)" in (actor.last_error or "")


async def test_actors_with_nothing_left_to_do_do_not_crowd_out_the_idle_judge(stage: Store) -> None:
    # A FROZEN actor whose policy is only Freeze has no next step: it must not take the judge's
    # places (the query returns the longest idle first, at most `limit`), however long it idles.
    done, _ = await frozen_actor(stage, "done", "f-done")
    due = await running_actor(stage, "due", "r-due")
    policy = [{"afterSeconds": 5, "action": "Freeze"}]
    for ref, idle in ((done, 9000), (due, 60)):
        await stage.pool.execute(
            "UPDATE actors SET idle_policy = $3, last_active_at = now() - make_interval(secs => $4) "
            "WHERE atespace = $1 AND name = $2", ref.atespace, ref.name, policy, idle,
        )  # fmt: skip
    assert [c.actor for c in await stage.idleness.candidates(limit=1)] == [due]
    await stage.pool.execute(
        "UPDATE actors SET idle_policy = $2 WHERE name = $1", "done",
        [{"afterSeconds": 5, "action": "Freeze"}, {"afterSeconds": 100, "action": "Suspend"}],
    )  # fmt: skip
    assert [c.actor for c in await stage.idleness.candidates(limit=1)] == [done]  # its Suspend is due now


async def test_a_thaw_that_failed_goes_back_to_frozen_keeping_worker_and_place(stage: Store) -> None:
    ref, home = await frozen_actor(stage)
    await stage.resumes.begin(ref, "r-thaw")
    progress = await stage.resumes.progress(ref, "r-thaw")
    assert progress.thaw and progress.worker is not None and progress.worker.name == home
    await stage.resumes.rollback_thaw(ref, "r-thaw", "atelet unreachable")
    actor = await stage.actors.get(ref)
    assert (actor.state, actor.operation, actor.last_error) == ("FROZEN", None, "atelet unreachable")
    assert actor.worker is not None and actor.worker.name == home
    assert await placements(stage) == {ref.workflow_id: home}  # its place and its sandbox are kept
    plan = await stage.resumes.begin(ref, "r-again")  # the next resume thaws again
    assert plan.thaw and plan.worker is not None and plan.worker.name == home


async def test_a_drained_node_suspends_its_frozen_actors_with_the_running_ones(stage: Store) -> None:
    # A node's eviction suspends what runs there before its deadline; a FROZEN actor's memory is
    # on that node too, so it is suspended, not left to be crashed at the deadline.
    from datetime import UTC, datetime, timedelta

    frozen, _ = await frozen_actor(stage, "cold", "f-cold")
    warm = await running_actor(stage, "warm", "r-warm")
    plan = await stage.drains.begin("n1", datetime.now(UTC) + timedelta(minutes=30))
    assert sorted(plan.running, key=lambda r: r.name) == [frozen, warm]
    assert plan.other == []
