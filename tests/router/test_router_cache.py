"""RUNNING-actor cache with real Postgres LISTEN/NOTIFY invalidation."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from router.core.cache import ActorCache
from router.core.upstream import Upstream

H = {"ate-target-actor": "demo/c1"}
DATA_PATHS = ("python", "nginx")


async def _until(predicate, timeout: float = 3.0) -> bool:
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return True
        await asyncio.sleep(0.01)
    return False


@pytest.mark.asyncio
async def test_notify_drops_the_cache_entry(start_router, database_url) -> None:
    env = await start_router(database_url=database_url)
    invalidator = env.router.core.invalidator
    await asyncio.wait_for(invalidator.connected.wait(), 10)
    assert (await env.client.get("/", headers=H)).status_code == 200
    assert env.api.calls["demo/c1"] == 1
    assert env.router.core.cache.get("demo/c1") == Upstream("127.0.0.1", env.worker.port)
    # Cache hits skip the API.
    for _ in range(3):
        assert (await env.client.get("/", headers=H)).status_code == 200
    assert env.api.calls["demo/c1"] == 1

    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("NOTIFY ate_actor_changes, 'demo/other SUSPENDING'")
        await conn.execute("NOTIFY ate_actor_changes, 'demo/c1 SUSPENDING'")
    finally:
        await conn.close()
    assert await _until(lambda: env.router.core.cache.get("demo/c1") is None)
    await env.settled()
    assert (await env.client.get("/", headers=H)).status_code == 200
    assert env.api.calls["demo/c1"] == 2


@pytest.mark.asyncio
async def test_lost_listen_connection_clears_cache_and_reconnects(start_router, database_url) -> None:
    env = await start_router(database_url=database_url)
    invalidator = env.router.core.invalidator
    await asyncio.wait_for(invalidator.connected.wait(), 10)
    assert (await env.client.get("/", headers=H)).status_code == 200
    assert len(env.router.core.cache) == 1
    conn = await asyncpg.connect(database_url)
    try:
        killed = await conn.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE query LIKE 'LISTEN%' AND pid <> pg_backend_pid()"
        )
        assert killed >= 1
        assert await _until(lambda: len(env.router.core.cache) == 0)
        # It reconnects and caches again.
        assert await _until(lambda: env.router.core.cache.enabled, timeout=5)
        await env.settled()
        calls = env.api.calls["demo/c1"]
        assert (await env.client.get("/", headers=H)).status_code == 200
        assert env.api.calls["demo/c1"] == calls + 1  # nothing served from before the loss
        assert env.router.core.cache.get("demo/c1") is not None
        await conn.execute("NOTIFY ate_actor_changes, 'demo/c1 DELETED'")
        assert await _until(lambda: env.router.core.cache.get("demo/c1") is None)
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_unreachable_database_means_no_caching(start_router) -> None:
    env = await start_router(database_url="postgresql://nobody@127.0.0.1:1/none")
    await asyncio.sleep(0.1)
    for _ in range(2):
        assert (await env.client.get("/", headers=H)).status_code == 200
    assert env.api.calls["demo/c1"] == 2
    assert not env.router.core.cache.enabled


def test_notification_during_resume_voids_the_ticket() -> None:
    cache = ActorCache()
    cache.enabled = True
    ticket = cache.begin("demo/c1")
    cache.on_notification("demo/c1 RUNNING")
    assert not cache.put(ticket, Upstream("10.0.0.1", 80))
    cache.end(ticket)
    ticket = cache.begin("demo/c1")
    cache.on_notification("demo/c2 RUNNING")
    assert cache.put(ticket, Upstream("10.0.0.1", 80))
    cache.end(ticket)
    assert cache.get("demo/c1") == Upstream("10.0.0.1", 80)


def test_clear_voids_tickets_and_disabled_cache_refuses() -> None:
    cache = ActorCache()
    cache.enabled = True
    ticket = cache.begin("demo/c1")
    cache.clear()
    assert not cache.put(ticket, Upstream("10.0.0.1", 80))
    cache.enabled = False
    assert not cache.put(cache.begin("demo/c1"), Upstream("10.0.0.1", 80))
    assert len(cache) == 0


def test_garbage_payload_clears_everything() -> None:
    cache = ActorCache()
    cache.enabled = True
    cache.put(cache.begin("demo/c1"), Upstream("10.0.0.1", 80))
    cache.on_notification("???")
    assert len(cache) == 0


def test_cache_is_bounded() -> None:
    cache = ActorCache(max_entries=2)
    cache.enabled = True
    for i in range(3):
        cache.put(cache.begin(f"demo/c{i}"), Upstream("10.0.0.1", 80))
    assert len(cache) == 2 and cache.get("demo/c0") is None
