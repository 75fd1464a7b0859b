"""Node loss on real Postgres: a silent node is lost, not dead (ARCHITECTURE.md "Actor states",
issue 12 "Nodes come and go, and a stall is not a crash").

Expected, from the state table: RUNNING --its node silent past the lease--> UNREACHABLE (worker
and place kept, workers UNAVAILABLE) --node back within the grace, its sandbox there--> RUNNING;
UNREACHABLE --grace passed / node back without the sandbox / node known gone--> CRASHED; a
returning node's sandbox of an actor that was reverted or crashed meanwhile is terminated (a
fencing order), never adopted. Lease and grace are given explicitly; a node's silence is made
by setting its last heartbeat back, and a grace's end by setting `unreachable_until` back.
"""

from __future__ import annotations

from typing import Any

import pytest

from domain.refs import ActorRef
from domain.templates import ActorTemplateSpec
from store import ActorUnreachable, FailedPrecondition, Store
from store.nodes import FencingOrder
from tests.activities.conftest import ONE_NODE_WORKERS as WORKERS
from tests.activities.test_lifecycle import running_actor, suspend
from tests.activities.test_store import SPEC, worker


async def silence(store: Store, node: str, seconds: int) -> None:
    async with store.pool.acquire() as connection:
        await connection.execute(
            "UPDATE nodes SET last_heartbeat = now() - make_interval(secs => $2) WHERE name = $1", node, seconds
        )


async def end_grace(store: Store, ref: ActorRef) -> None:
    async with store.pool.acquire() as connection:
        await connection.execute(
            "UPDATE actors SET unreachable_until = now() - interval '1 second' WHERE atespace = $1 AND name = $2",
            ref.atespace,
            ref.name,
        )


async def placements(store: Store) -> dict[str, str]:
    async with store.pool.acquire() as connection:
        rows = await connection.fetch("SELECT p.holder, w.name FROM placements p JOIN workers w ON w.id = p.worker_id")
    return {r["holder"]: r["name"] for r in rows}


async def worker_states(store: Store) -> dict[str, tuple[str, str | None]]:
    async with store.pool.acquire() as connection:
        rows = await connection.fetch("SELECT name, state, state_reason FROM workers WHERE node = 'n1'")
    return {r["name"]: (r["state"], r["state_reason"]) for r in rows}


async def history(store: Store, ref: ActorRef) -> list[tuple[str, str | None, str | None]]:
    return [(o.operation, o.outcome, o.error) for o in await store.history.of_actor(ref)]


async def lost_actor(stage: Store) -> tuple[ActorRef, str, str]:
    """A RUNNING actor whose node n1 fell silent: (ref, its worker, the other worker)."""
    ref = await running_actor(stage)
    actor = await stage.actors.get(ref)
    assert actor.worker is not None
    home = actor.worker.name
    await silence(stage, "n1", 5)
    assert await stage.liveness.mark_lost(lease_seconds=4, grace_seconds=60) == ["n1"]
    return ref, home, ("w0" if home == "w1" else "w1")


async def test_a_silent_node_makes_its_running_actor_unreachable_not_crashed(stage: Store) -> None:
    ref = await running_actor(stage)
    await silence(stage, "n1", 3)
    assert await stage.liveness.mark_lost(lease_seconds=4, grace_seconds=60) == []  # within its lease
    await silence(stage, "n1", 5)
    assert await stage.liveness.mark_lost(lease_seconds=4, grace_seconds=60) == ["n1"]
    assert await stage.liveness.mark_lost(lease_seconds=4, grace_seconds=60) == []  # once

    actor = await stage.actors.get(ref)
    assert actor.state == "UNREACHABLE"
    assert actor.worker is not None  # it keeps its worker and its place
    assert await placements(stage) == {ref.workflow_id: actor.worker.name}
    assert actor.last_error is not None and actor.last_error.startswith("node n1 stopped answering (no heartbeat since")
    assert set((await worker_states(stage)).values()) == {("UNAVAILABLE", "node lost")}  # out of placement
    assert not await stage.nodes.live_atelet_of("n1")
    assert (await history(stage, ref))[0][:2] == ("NodeLost", "waiting")

    why = await stage.liveness.unreachable(ref)
    assert why is not None and why.node == "n1"
    assert 5 <= why.silent_seconds < 30 and 30 < why.remaining_seconds <= 60
    with pytest.raises(ActorUnreachable) as refused:
        await stage.resumes.begin(ref, "r2")
    assert refused.value.reason == "Unreachable"
    assert refused.value.message.startswith("actor demo/a1 is UNREACHABLE: node n1 stopped answering ")
    assert "s more for it to return (then the actor is CRASHED)" in refused.value.message
    with pytest.raises(FailedPrecondition, match="cannot be suspended from state UNREACHABLE"):
        await stage.suspends.begin(ref, "s1")
    with pytest.raises(FailedPrecondition, match="its node stopped answering: wait for the node to return"):
        await stage.pauses.begin(ref, "p1")
    assert (await stage.actors.get(ref)).state == "UNREACHABLE"  # refusals change nothing


async def test_a_node_back_within_the_grace_gets_its_actor_back_running(stage: Store) -> None:
    ref, home, other = await lost_actor(stage)
    orders = await stage.nodes.register("n1", "127.0.0.1:1", "v", WORKERS, {home: ("demo", "a1"), other: None})
    assert orders == []  # its own sandbox: adopted again, nothing to terminate
    actor = await stage.actors.get(ref)
    assert (actor.state, actor.last_error) == ("RUNNING", None)
    assert actor.worker is not None and actor.worker.name == home  # the same sandbox, memory intact
    assert await placements(stage) == {ref.workflow_id: home}
    assert set((await worker_states(stage)).values()) == {("ACTIVE", None)}  # takes new actors at once
    assert await stage.nodes.live_atelet_of("n1") == "127.0.0.1:1"
    [(operation, outcome, error), *_] = await history(stage, ref)
    assert (operation, outcome) == ("NodeLost", "returned")
    assert error is not None and error.startswith("node n1 stopped answering")
    other_actor = ActorRef("demo", "a2")
    await stage.actors.create(other_actor, "counter", {})
    plan = await stage.resumes.begin(other_actor, "r-a2")  # placed on the returned node's free worker
    assert plan.worker is not None and plan.worker.name == other


async def test_a_node_back_without_the_sandbox_crashes_the_actor(stage: Store) -> None:
    ref, home, other = await lost_actor(stage)
    assert await stage.nodes.register("n1", "127.0.0.1:1", "v", WORKERS, {home: None, other: None}) == []
    actor = await stage.actors.get(ref)
    assert (actor.state, actor.worker) == ("CRASHED", None)
    assert actor.last_error is not None
    assert f"node n1 answered again but it no longer has the actor's sandbox (restart or crash) on worker {home}" in (
        actor.last_error
    )
    assert await placements(stage) == {}
    assert (await history(stage, ref))[0][:2] == ("NodeLost", "crashed")


async def test_a_sandbox_that_exited_during_the_silence_is_crashed_and_fenced(stage: Store) -> None:
    ref, home, other = await lost_actor(stage)
    orders = await stage.nodes.register(
        "n1", "127.0.0.1:1", "v", WORKERS, {home: ("demo", "a1"), other: None}, exited=frozenset({home})
    )
    assert orders == [FencingOrder(worker=home, atespace="demo", name="a1")]  # the atelet frees the worker
    actor = await stage.actors.get(ref)
    assert actor.state == "CRASHED" and "its sandbox exited meanwhile" in (actor.last_error or "")
    assert (await worker_states(stage))[home][0] == "UNAVAILABLE"  # fenced until it reports the worker idle


async def test_an_exit_reported_while_unreachable_crashes_the_actor(stage: Store) -> None:
    ref, home, _ = await lost_actor(stage)
    assert await stage.nodes.record_sandbox_exit("n1", home, ref, "exit status 1")
    assert (await stage.actors.get(ref)).state == "CRASHED"


async def test_past_the_grace_the_actor_is_crashed_and_its_returning_sandbox_terminated(stage: Store) -> None:
    ref, home, other = await lost_actor(stage)
    assert await stage.liveness.expire_unreachable() == []  # the grace has not run out
    await end_grace(stage, ref)
    assert await stage.liveness.expire_unreachable() == [ref]
    assert await stage.liveness.expire_unreachable() == []
    actor = await stage.actors.get(ref)
    assert (actor.state, actor.worker) == ("CRASHED", None)
    assert actor.last_error is not None
    assert actor.last_error.startswith("node n1 did not answer within the grace (silent for ")
    assert "'ate revert actor a1 -a demo'" in actor.last_error
    assert await placements(stage) == {}
    assert (await history(stage, ref))[0][:2] == ("NodeLost", "crashed")
    with pytest.raises(FailedPrecondition) as refused:  # a resume names the way out once, not twice
        await stage.resumes.begin(ref, "r-after-crash")
    assert refused.value.message == f"actor demo/a1 is CRASHED ({actor.last_error})"

    # the node comes back with the sandbox: it is terminated, never adopted
    orders = await stage.nodes.register("n1", "127.0.0.1:1", "v", WORKERS, {home: ("demo", "a1"), other: None})
    assert orders == [FencingOrder(worker=home, atespace="demo", name="a1")]
    assert (await stage.actors.get(ref)).state == "CRASHED"
    assert (await worker_states(stage))[home] == ("UNAVAILABLE", "fenced: stopping demo/a1")
    assert (await worker_states(stage))[other] == ("ACTIVE", None)


async def test_a_revert_while_unreachable_needs_no_node_and_the_old_sandbox_is_terminated(stage: Store) -> None:
    ref = await running_actor(stage)
    first = await suspend(stage, ref, "s1")
    await stage.resumes.begin(ref, "r2")
    await stage.resumes.finish(ref, "r2")
    home = (await stage.actors.get(ref)).worker.name  # type: ignore[union-attr]
    await silence(stage, "n1", 5)
    assert await stage.liveness.mark_lost(lease_seconds=4, grace_seconds=60) == ["n1"]

    plan = await stage.reverts.begin(ref, "v1")
    assert (plan.from_state, plan.node_alive) == ("UNREACHABLE", False)  # the workflow fences, no atelet call
    assert plan.worker is not None and plan.worker.name == home
    await stage.nodes.fence_worker(plan.worker.worker_id, "fenced: demo/a1 was reverted while node n1 was unreachable")
    await stage.reverts.finish(ref, "v1", "reverted from UNREACHABLE")
    actor = await stage.actors.get(ref)
    assert (actor.state, actor.worker) == ("SUSPENDED", None)
    assert actor.latest_snapshot is not None and actor.latest_snapshot.snapshot_id == first
    assert (await history(stage, ref))[1][:2] == ("NodeLost", "reverted")
    assert await stage.liveness.expire_unreachable() == []  # nothing waits any more

    # the actor resumes elsewhere before its old node returns; the old sandbox is terminated
    await stage.nodes.register("n2", "127.0.0.2:1", "v", [worker("w2")])
    plan2 = await stage.resumes.begin(ref, "r3")
    assert plan2.worker is not None and plan2.worker.node == "n2"  # n1's workers are out of placement
    await stage.resumes.finish(ref, "r3")
    orders = await stage.nodes.register("n1", "127.0.0.1:1", "v", WORKERS, {home: ("demo", "a1")})
    assert orders == [FencingOrder(worker=home, atespace="demo", name="a1")]
    actor = await stage.actors.get(ref)
    assert actor.state == "RUNNING" and actor.worker is not None and actor.worker.node == "n2"  # runs once


async def test_a_deleted_worker_pod_crashes_what_ran_there_and_releases_the_rest(stage: Store) -> None:
    running = await running_actor(stage, "a1", "r1")
    waiting = await running_actor(stage, "a2", "r2")
    async with stage.pool.acquire() as connection:  # a2 waits for its node (as mark_lost leaves it)
        await connection.execute(
            "UPDATE actors SET state = 'UNREACHABLE', unreachable_until = now() + interval '1 minute' WHERE name = 'a2'"
        )
    resuming = ActorRef("demo", "a3")
    await stage.nodes.register("n1", "127.0.0.1:1", "v", [*WORKERS, worker("w3")])
    await stage.actors.create(resuming, "counter", {})
    await stage.resumes.begin(resuming, "r3")  # restoring there when the pod goes

    released = dict(await stage.nodes.retire("n1", "worker pod ate/n1 was deleted"))
    assert released == {running: "CRASHED", waiting: "CRASHED", resuming: "SUSPENDED"}
    for ref in (running, waiting):
        actor = await stage.actors.get(ref)
        assert actor.last_error is not None
        assert actor.last_error.startswith("worker pod ate/n1 was deleted while the actor ran there")
    restoring = await stage.actors.get(resuming)
    assert restoring.last_error == "worker pod ate/n1 was deleted; back to its last completed snapshot"


async def test_crashed_actors_of_templates_with_on_crash_revert_are_listed_for_recovery(stage: Store) -> None:
    recovering: dict[str, Any] = {**SPEC, "onCrash": "Revert"}
    await stage.templates.create("demo", "healing", ActorTemplateSpec.from_document(recovering))
    async with stage.pool.acquire() as connection:
        golden = await connection.fetchval("SELECT golden_snapshot_id FROM actor_templates WHERE name = 'counter'")
    await stage.templates.set_phase("demo", "healing", "Ready", None, golden)
    plain = await running_actor(stage, "plain", "r1")
    healing = ActorRef("demo", "heal")
    await stage.actors.create(healing, "healing", {})
    await stage.resumes.begin(healing, "r2")
    await stage.resumes.finish(healing, "r2")
    assert await stage.liveness.crashed_to_recover() == []  # nothing CRASHED yet
    for ref in (plain, healing):
        worker_id = (await stage.actors.get(ref)).worker.worker_id  # type: ignore[union-attr]
        assert await stage.nodes.crash_actor(ref, worker_id, "sandbox exited: exit status 3")
    [only] = await stage.liveness.crashed_to_recover()
    assert (only.actor, only.last_error) == (healing, "sandbox exited: exit status 3")
    assert (await stage.templates.get("demo", "healing")).spec.document()["onCrash"] == "Revert"


async def test_an_actor_that_keeps_crashing_after_its_automatic_reverts_is_left_crashed_once_told(stage: Store) -> None:
    """Three automatic recoveries within ten minutes and a fourth crash: no fourth revert; its last
    error says why, once. Recoveries older than the window do not count."""
    recovering: dict[str, Any] = {**SPEC, "onCrash": "Revert"}
    await stage.templates.create("demo", "healing", ActorTemplateSpec.from_document(recovering))
    async with stage.pool.acquire() as connection:
        golden = await connection.fetchval("SELECT golden_snapshot_id FROM actor_templates WHERE name = 'counter'")
    await stage.templates.set_phase("demo", "healing", "Ready", None, golden)
    ref = ActorRef("demo", "loop")
    await stage.actors.create(ref, "healing", {})
    await stage.resumes.begin(ref, "r1")
    await stage.resumes.finish(ref, "r1")
    worker_id = (await stage.actors.get(ref)).worker.worker_id  # type: ignore[union-attr]
    assert await stage.nodes.crash_actor(ref, worker_id, "sandbox exited: exit status 3")

    async def recoveries(ages_seconds: list[int]) -> None:  # as RevertActor records them (store/reverts.py)
        async with stage.pool.acquire() as connection:
            for i, age in enumerate(ages_seconds):
                await connection.execute(
                    "INSERT INTO operations (operation_id, atespace, actor, operation, outcome, error, started_at) "
                    "VALUES ($1, 'demo', 'loop', 'RevertActor', 'ok', 'automatic recovery (onCrash: Revert) from the "
                    "crash: sandbox exited', now() - make_interval(secs => $2))",
                    f"rev-{age}-{i}", age,
                )

    await recoveries([700, 650, 620])  # three, but all older than the 600 s window
    assert [c.actor for c in await stage.liveness.crashed_to_recover()] == [ref]
    assert await stage.liveness.stop_crash_loops() == []
    await recoveries([300, 200])  # two within the window: still recovered
    assert [c.actor for c in await stage.liveness.crashed_to_recover()] == [ref]
    await recoveries([100])  # the third within the window
    assert await stage.liveness.crashed_to_recover() == []
    assert await stage.liveness.stop_crash_loops() == [ref]
    assert await stage.liveness.stop_crash_loops() == []  # told once
    actor = await stage.actors.get(ref)
    assert actor.state == "CRASHED"
    assert actor.last_error == (
        "sandbox exited: exit status 3; automatic recovery stopped: 3 reverts (onCrash: Revert) within 600 s did not "
        "keep it running; find the cause with 'ate describe actor', then revert it with 'ate revert actor'"
    )
