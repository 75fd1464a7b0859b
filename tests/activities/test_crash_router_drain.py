"""A crash holds its worker until the router replicas drained the actor, on real PostgreSQL
(issue 13: "After the actor leaves RUNNING no router may deliver a request to its old worker
address, even if that worker now hosts another actor").

Expected, from that rule and the drain step before a checkpoint (domain/operations/router_drain.py):
the crash records a drain of the actor that every live replica is told of; the worker takes no
actor until each live replica acknowledged it, or its drain timeout plus the 5 s margin passed;
a silent replica is not waited for; with no live replica there is nothing to wait for.
"""

from __future__ import annotations

import pytest

from domain.refs import ActorRef
from store import NoCapacity, Store
from tests.activities.conftest import ONE_NODE_WORKERS as WORKERS
from tests.activities.test_lifecycle import running_actor


async def home_of(store: Store, ref: ActorRef) -> str:
    actor = await store.actors.get(ref)
    assert actor.worker is not None
    return actor.worker.name


async def worker_state(store: Store, name: str) -> tuple[str, str | None, int | None]:
    async with store.pool.acquire() as connection:
        row = await connection.fetchrow(
            "SELECT state, state_reason, router_drain_id FROM workers WHERE node = 'n1' AND name = $1", name
        )
    return row["state"], row["state_reason"], row["router_drain_id"]


async def heartbeat(store: Store, busy: dict[str, tuple[str, str] | None]) -> None:
    """The node's heartbeat: what it runs on each worker (None: idle)."""
    assert await store.nodes.register("n1", "127.0.0.1:1", "v", WORKERS, busy) == []


async def crashed_with_the_other_worker_busy(stage: Store) -> tuple[ActorRef, str, str]:
    """a1 RUNNING, a3 RUNNING on the other worker; a1's sandbox exits and its atelet frees the
    worker (it reports it idle). Returns (a1, its worker, a3's worker)."""
    a1 = await running_actor(stage, "a1", "r1")
    a3 = await running_actor(stage, "a3", "r3")
    home, other = await home_of(stage, a1), await home_of(stage, a3)
    assert await stage.nodes.record_sandbox_exit("n1", home, a1, "exit status 137")
    assert (await stage.actors.get(a1)).state == "CRASHED"
    await heartbeat(stage, {home: None, other: ("demo", "a3")})
    return a1, home, other


async def test_the_worker_of_a_crashed_actor_waits_for_every_live_replica(stage: Store) -> None:
    await stage.router_drains.heartbeat("r1", 10.0, 10.0)
    await stage.router_drains.heartbeat("r2", 10.0, 10.0)
    a1, home, other = await crashed_with_the_other_worker_busy(stage)

    # Each replica is told to drain a1 (its heartbeat lists the drain; NOTIFY too).
    [drain] = await stage.router_drains.heartbeat("r1", 10.0, 10.0)
    assert drain.actor == a1
    assert [d.drain_id for d in await stage.router_drains.heartbeat("r2", 10.0, 10.0)] == [drain.drain_id]
    state, reason, held_by = await worker_state(stage, home)
    assert (state, held_by) == ("UNAVAILABLE", drain.drain_id)
    assert reason is not None and "held until every router replica has drained demo/a1" in reason

    a2 = ActorRef("demo", "a2")
    await stage.actors.create(a2, "counter", {})
    await stage.placement.view.sync()  # placement sees the hold (else its bind refuses it: "meanwhile")
    with pytest.raises(NoCapacity) as refused:
        await stage.resumes.begin(a2, "r2")  # the only free worker is held
    assert str(refused.value) == (
        "no worker has room for the actor demo/a2: 2 workers: 1 held until the router replicas drained the actor "
        "that crashed there (seconds; retry), 1 busy (a worker hosts one actor)"
    )

    await stage.router_drains.acknowledge(drain.drain_id, "r1")
    await heartbeat(stage, {home: None, other: ("demo", "a3")})
    assert (await worker_state(stage, home))[0] == "UNAVAILABLE"  # r2 has not drained a1 yet

    await stage.router_drains.acknowledge(drain.drain_id, "r2")
    await heartbeat(stage, {home: None, other: ("demo", "a3")})
    assert await worker_state(stage, home) == ("ACTIVE", None, None)
    plan = await stage.resumes.begin(a2, "r2b")
    assert plan.worker is not None and plan.worker.name == home


async def test_a_replica_that_never_drains_is_waited_for_until_its_bound(stage: Store) -> None:
    await stage.router_drains.heartbeat("mute", 30.0, 2.0)  # bound: 2 s drain timeout + 5 s margin
    _, home, other = await crashed_with_the_other_worker_busy(stage)
    assert (await worker_state(stage, home))[0] == "UNAVAILABLE"
    async with stage.pool.acquire() as connection:
        await connection.execute("UPDATE router_drains SET requested_at = now() - interval '6 seconds'")
    await heartbeat(stage, {home: None, other: ("demo", "a3")})
    assert (await worker_state(stage, home))[0] == "UNAVAILABLE"  # 6 s < 7 s
    async with stage.pool.acquire() as connection:
        await connection.execute("UPDATE router_drains SET requested_at = now() - interval '8 seconds'")
    await heartbeat(stage, {home: None, other: ("demo", "a3")})
    assert await worker_state(stage, home) == ("ACTIVE", None, None)


async def test_a_silent_replica_or_none_at_all_holds_nothing(stage: Store) -> None:
    await stage.router_drains.heartbeat("gone", 1.0, 10.0)
    async with stage.pool.acquire() as connection:  # its 1 s lease ran out long ago
        await connection.execute("UPDATE router_replicas SET last_seen_at = now() - interval '5 seconds'")
    _, home, _ = await crashed_with_the_other_worker_busy(stage)
    assert await worker_state(stage, home) == ("ACTIVE", None, None)


async def test_an_atelet_that_lost_its_sandboxes_holds_their_workers_too(stage: Store) -> None:
    await stage.router_drains.heartbeat("r1", 10.0, 10.0)
    a1 = await running_actor(stage, "a1", "r1")
    home = await home_of(stage, a1)
    other = "w0" if home == "w1" else "w1"
    async with stage.pool.acquire() as connection:  # RUNNING long enough to be taken as settled
        await connection.execute("UPDATE actors SET updated_at = now() - interval '1 minute'")
    await heartbeat(stage, {home: None, other: None})  # restarted without the sandbox
    actor = await stage.actors.get(a1)
    assert actor.state == "CRASHED" and "sandbox not found on worker" in (actor.last_error or "")
    [drain] = await stage.router_drains.heartbeat("r1", 10.0, 10.0)
    assert drain.actor == a1
    assert (await worker_state(stage, home))[0] == "UNAVAILABLE"
    assert (await worker_state(stage, other))[0] == "ACTIVE"
    await stage.router_drains.acknowledge(drain.drain_id, "r1")
    await heartbeat(stage, {home: None, other: None})
    assert await worker_state(stage, home) == ("ACTIVE", None, None)
