"""Router replicas and drains on real PostgreSQL (store.router_drains), and the
`drain_routers` step: it waits for every live replica's acknowledgement, not for a silent one,
and gives up at the bound when a live one never answers."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from temporalio.testing import ActivityEnvironment

from activities.db import DbActivities
from domain.operations.router_drain import RouterDrainInput
from domain.refs import ActorRef
from store import NotFound, Store

C1 = ActorRef("demo", "c1")


async def test_a_drain_is_listed_to_each_replica_until_it_acknowledges(store: Store) -> None:
    assert await store.router_drains.heartbeat("r1", 10.0, 10.0) == []
    assert await store.router_drains.heartbeat("r2", 10.0, 10.0) == []
    drain = await store.router_drains.request(C1, "op-1")
    assert await store.router_drains.request(C1, "op-1") == drain  # a retry of the same operation
    progress = await store.router_drains.waiting(drain)
    assert (progress.acknowledged, progress.missing) == ([], ["r1", "r2"])
    listed = await store.router_drains.heartbeat("r1", 10.0, 10.0)
    assert [(d.drain_id, d.actor) for d in listed] == [(drain, C1)]
    await store.router_drains.acknowledge(drain, "r1")
    await store.router_drains.acknowledge(drain, "r1")  # idempotent
    assert await store.router_drains.heartbeat("r1", 10.0, 10.0) == []
    progress = await store.router_drains.waiting(drain)
    assert (progress.acknowledged, progress.missing) == (["r1"], ["r2"])
    with pytest.raises(NotFound, match="router drain 999999 not found"):
        await store.router_drains.acknowledge(999999, "r1")



async def test_a_released_replica_is_waited_for_no_more_and_a_heartbeat_brings_it_back(store: Store) -> None:
    await store.router_drains.heartbeat("r1", 10.0, 10.0)
    await store.router_drains.heartbeat("r2", 10.0, 10.0)
    drain = await store.router_drains.request(C1, "op-release")
    await store.router_drains.release("r1")  # r1 stopped cleanly
    progress = await store.router_drains.waiting(drain)
    assert (progress.acknowledged, progress.missing) == ([], ["r2"])
    listed = {r.name: (r.live, r.lease_seconds) for r in await store.router_drains.replicas()}
    assert listed == {"r1": (False, 0.0), "r2": (True, 10.0)}  # still listed, not live
    with pytest.raises(NotFound, match="router replica nobody is not registered"):
        await store.router_drains.release("nobody")
    await store.router_drains.heartbeat("r1", 10.0, 10.0)  # started again under the same name
    assert (await store.router_drains.waiting(drain)).missing == ["r1", "r2"]

async def test_a_drain_request_is_notified_on_ate_router_drains(store: Store, database_url: str) -> None:
    listener = await asyncpg.connect(database_url)
    got: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener("ate_router_drains", lambda _c, _p, _ch, payload: got.put_nowait(payload))
    try:
        drain = await store.router_drains.request(C1, "op-notify")
        assert await asyncio.wait_for(got.get(), 10) == f"{drain} demo/c1"
    finally:
        await listener.close()


async def test_the_step_waits_for_every_live_replica_and_not_for_a_silent_one(store: Store) -> None:
    await store.router_drains.heartbeat("live", 10.0, 10.0)
    await store.router_drains.heartbeat("silent", 1.0, 10.0)  # its 1 s lease runs out unrenewed
    async with store.pool.acquire() as connection:
        await connection.execute(
            "UPDATE router_replicas SET last_seen_at = now() - interval '5 seconds' WHERE name = 'silent'"
        )
    step = asyncio.create_task(
        ActivityEnvironment().run(DbActivities(store).drain_routers, RouterDrainInput(C1, "op-2"))
    )
    while True:  # the replica learns of the drain as it would, from its heartbeat
        listed = await store.router_drains.heartbeat("live", 10.0, 10.0)
        if listed:
            break
        await asyncio.sleep(0.05)
    assert not step.done()  # waiting for "live"
    await store.router_drains.acknowledge(listed[0].drain_id, "live")
    result = await step
    assert (result.acknowledged, result.missing) == (["live"], [])


async def test_the_step_gives_up_at_the_bound_when_a_live_replica_never_answers(store: Store) -> None:
    await store.router_drains.heartbeat("mute", 30.0, 0.0)  # drain timeout 0: bound = the margin
    result = await ActivityEnvironment().run(DbActivities(store).drain_routers, RouterDrainInput(C1, "op-3"))
    assert (result.acknowledged, result.missing) == ([], ["mute"])  # the checkpoint goes ahead


async def test_a_revert_waits_no_longer_than_its_own_bound(store: Store) -> None:
    # A replica with a 120 s drain timeout would be waited for 125 s; a revert (its sandbox is
    # stopped already) asks for 0.3 s at most and goes on without it.
    await store.router_drains.heartbeat("slow", 30.0, 120.0)
    step = DbActivities(store).drain_routers
    result = await asyncio.wait_for(
        ActivityEnvironment().run(step, RouterDrainInput(C1, "op-4", max_wait_seconds=0.3)), 20
    )
    assert (result.acknowledged, result.missing) == ([], ["slow"])
    assert 0.3 <= result.waited_seconds < 20


async def test_an_idle_drain_is_listed_and_notified_as_such_and_a_busy_replica_refuses_it(
    store: Store, database_url: str
) -> None:
    await store.router_drains.heartbeat("busy", 10.0, 10.0)
    await store.router_drains.heartbeat("quiet", 10.0, 10.0)
    listener = await asyncpg.connect(database_url)
    got: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener("ate_router_drains", lambda _c, _p, _ch, payload: got.put_nowait(payload))
    try:
        drain = await store.router_drains.request(C1, "op-idle", if_idle=True)
        assert await asyncio.wait_for(got.get(), 10) == f"{drain}:idle demo/c1"
        assert await store.router_drains.request(C1, "op-idle") == drain  # a retry: the recorded kind stays
        assert await asyncio.wait_for(got.get(), 10) == f"{drain}:idle demo/c1"
    finally:
        await listener.close()
    [listed] = await store.router_drains.heartbeat("busy", 10.0, 10.0)
    assert (listed.drain_id, listed.if_idle) == (drain, True)
    await store.router_drains.acknowledge(drain, "busy", busy=True)
    await store.router_drains.acknowledge(drain, "busy")  # idempotent: the first answer stays
    await store.router_drains.acknowledge(drain, "quiet")
    progress = await store.router_drains.waiting(drain)
    assert (progress.acknowledged, progress.missing, progress.busy) == (["busy", "quiet"], [], ["busy"])
    ordinary = await store.router_drains.request(C1, "op-ordinary")
    [listed] = await store.router_drains.heartbeat("busy", 10.0, 10.0)
    assert (listed.drain_id, listed.if_idle) == (ordinary, False)


async def test_the_idle_step_ends_at_the_first_busy_replica_and_names_it(store: Store) -> None:
    await store.router_drains.heartbeat("busy", 10.0, 10.0)
    await store.router_drains.heartbeat("mute", 30.0, 10.0)  # never answers: not waited for once one refused
    step = asyncio.create_task(
        ActivityEnvironment().run(DbActivities(store).drain_routers, RouterDrainInput(C1, "op-5", if_idle=True))
    )
    while not (listed := await store.router_drains.heartbeat("busy", 10.0, 10.0)):
        await asyncio.sleep(0.05)
    await store.router_drains.acknowledge(listed[0].drain_id, "busy", busy=True)
    result = await asyncio.wait_for(step, 5)  # not the 15 s bound of "mute"
    assert (result.busy, result.acknowledged, result.missing) == (["busy"], ["busy"], ["mute"])


async def test_an_ordinary_step_result_has_no_busy_replica(store: Store) -> None:
    await store.router_drains.heartbeat("r1", 10.0, 0.0)
    step = asyncio.create_task(
        ActivityEnvironment().run(DbActivities(store).drain_routers, RouterDrainInput(C1, "op-6"))
    )
    while not (listed := await store.router_drains.heartbeat("r1", 10.0, 0.0)):
        await asyncio.sleep(0.05)
    await store.router_drains.acknowledge(listed[0].drain_id, "r1")
    assert (await step).busy == []


async def test_touch_sets_last_active_at_of_the_actors_named_and_skips_unknown_ones(store: Store) -> None:
    await demo_template(store)
    for name in ("a1", "a2", "a3"):
        await store.actors.create(ActorRef("demo", name), "counter", {})
    await store.pool.execute("UPDATE actors SET last_active_at = now() - interval '1 hour'")
    touched = await store.actors.touch([ActorRef("demo", "a2"), ActorRef("demo", "a1"), ActorRef("demo", "nope")])
    assert touched == 2
    rows = await store.pool.fetch(
        "SELECT name, now() - last_active_at < interval '1 minute' AS fresh FROM actors ORDER BY name"
    )
    assert [(r["name"], r["fresh"]) for r in rows] == [("a1", True), ("a2", True), ("a3", False)]
    assert await store.actors.touch([]) == 0


async def test_replicas_touching_the_same_actors_at_once_do_not_deadlock(store: Store) -> None:
    await demo_template(store)
    actors = [ActorRef("demo", f"a{i}") for i in range(50)]
    for ref in actors:
        await store.actors.create(ref, "counter", {})
    await asyncio.wait_for(
        asyncio.gather(*(store.actors.touch(actors if i % 2 else actors[::-1]) for i in range(8))), 30
    )


async def demo_template(store: Store) -> None:
    """Atespace demo and its template counter (Pending: actors can be created, none resumed)."""
    from domain.templates import ActorTemplateSpec
    from tests.activities.test_store import SPEC

    await store.atespaces.create("demo")
    await store.templates.create("demo", "counter", ActorTemplateSpec.from_document(dict(SPEC)))
