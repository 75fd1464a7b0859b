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
