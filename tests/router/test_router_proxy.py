"""Proxy mechanics: streaming bodies, header handling, no keep-alive to workers, retries."""

from __future__ import annotations

import asyncio
import hashlib
import os

import httpx
import pytest
from router_harness import free_port, pattern

from router.types import Upstream

H = {"ate-target-actor": "demo/c1"}
MB5 = 5 * 1024 * 1024


async def _no_worker_connections(env, timeout: float = 1.0) -> bool:
    for _ in range(int(timeout / 0.01)):
        if not env.worker.server.server_state.connections:
            return True
        await asyncio.sleep(0.01)
    return False


@pytest.mark.asyncio
async def test_method_path_query_and_raw_path_are_forwarded(start_router) -> None:
    env = await start_router()
    resp = await env.client.request("PATCH", "/a%2Fb/c?x=1&y=%20z", headers=H, content=b"{}")
    assert resp.status_code == 200
    seen = resp.json()
    assert seen["method"] == "PATCH"
    assert seen["raw_path"] == "/a%2Fb/c"
    assert seen["query"] == "x=1&y=%20z"


@pytest.mark.asyncio
async def test_streaming_upload_of_5mb(start_router) -> None:
    env = await start_router()
    data = os.urandom(MB5)

    async def chunks():
        for i in range(0, len(data), 256 * 1024):
            yield data[i : i + 256 * 1024]
            await asyncio.sleep(0)

    # Chunked (no Content-Length) and with Content-Length.
    for content in (chunks(), data):
        resp = await env.client.post("/upload", headers=H, content=content)
        assert resp.status_code == 200, resp.text
        assert resp.json() == {"sha256": hashlib.sha256(data).hexdigest(), "size": MB5}


@pytest.mark.asyncio
async def test_streaming_download_of_5mb(start_router) -> None:
    env = await start_router()
    received = bytearray()
    chunks = 0
    async with env.client.stream("GET", f"/download?n={MB5}", headers=H) as resp:
        assert resp.status_code == 200
        async for chunk in resp.aiter_raw():
            received += chunk
            chunks += 1
    assert len(received) == MB5
    assert bytes(received) == pattern(0, MB5)
    assert chunks > 1  # streamed, not buffered into one piece


@pytest.mark.asyncio
async def test_body_round_trips_through_echo(start_router) -> None:
    env = await start_router()
    data = os.urandom(MB5)
    resp = await env.client.post("/echo-body", headers=H, content=data)
    assert resp.status_code == 200
    assert resp.content == data


@pytest.mark.asyncio
async def test_hop_by_hop_headers_dropped_and_forwarded_headers_added(start_router) -> None:
    env = await start_router()
    resp = await env.client.get(
        "/echo",
        headers={
            **H,
            "connection": "keep-alive, x-private-hop",
            "x-private-hop": "1",
            "keep-alive": "timeout=5",
            "te": "trailers",
            "proxy-authorization": "Basic abc",
            "upgrade": "h2c",
            "x-forwarded-for": "10.1.1.1",
            "x-custom": "kept",
        },
    )
    assert resp.status_code == 200
    headers = {k: v for k, v in resp.json()["headers"]}
    names = [k for k, _ in resp.json()["headers"]]
    for dropped in ("ate-target-actor", "x-private-hop", "keep-alive", "te",
                    "proxy-authorization", "upgrade"):
        assert dropped not in names
    assert headers["x-custom"] == "kept"
    assert headers["connection"] == "close"
    assert headers["x-forwarded-for"] == "10.1.1.1, 127.0.0.1"
    assert headers["x-forwarded-host"] == env.url.removeprefix("http://")
    assert headers["x-forwarded-proto"] == "http"
    assert headers["host"] == f"127.0.0.1:{env.worker.port}"
    # The worker's hop-by-hop response headers are dropped; repeated headers kept.
    assert "x-worker-hop" not in resp.headers
    assert "keep-alive" not in resp.headers
    assert resp.headers.get_list("set-cookie") == ["a=1", "b=2"]


@pytest.mark.asyncio
async def test_host_form_forwards_host_as_x_forwarded_host(start_router) -> None:
    env = await start_router()
    resp = await env.client.get("/", headers={"host": "c1.demo.actors.ate.local"})
    headers = dict(resp.json()["headers"])
    assert headers["x-forwarded-host"] == "c1.demo.actors.ate.local"


@pytest.mark.asyncio
async def test_no_keep_alive_to_the_worker(start_router) -> None:
    env = await start_router()
    for i in range(3):
        resp = await env.client.get(f"/n{i}", headers=H)
        assert resp.status_code == 200
        assert await _no_worker_connections(env), "worker connection left open"
    # Large streamed response too.
    resp = await env.client.get(f"/download?n={MB5}", headers=H)
    assert len(resp.content) == MB5
    assert await _no_worker_connections(env)
    # Each request came on a fresh connection.
    assert len(set(env.worker_log.client_ports)) == len(env.worker_log.client_ports) == 4


@pytest.mark.asyncio
async def test_client_leaving_mid_download_closes_the_worker_connection(start_router) -> None:
    env = await start_router()
    async with env.client.stream("GET", f"/download?n={50 * MB5}", headers=H) as resp:
        async for _chunk in resp.aiter_raw():
            break
    await env.client.aclose()
    assert await _no_worker_connections(env, timeout=3), "router kept streaming after the client left"


@pytest.mark.asyncio
async def test_cached_actor_unreachable_is_resumed_again(start_router) -> None:
    env = await start_router()
    cache = env.router.cache
    cache.enabled = True  # as if LISTEN were live
    cache.put(cache.begin("demo/c1"), Upstream("127.0.0.1", free_port()))
    resp = await env.client.get("/moved", headers=H)
    assert resp.status_code == 200, resp.text
    assert resp.json()["path"] == "/moved"
    assert env.api.calls["demo/c1"] == 1
    assert cache.get("demo/c1") == Upstream("127.0.0.1", env.worker.port)


@pytest.mark.asyncio
async def test_cache_hit_skips_the_api(start_router) -> None:
    env = await start_router()
    cache = env.router.cache
    cache.enabled = True
    cache.put(cache.begin("demo/c1"), Upstream("127.0.0.1", env.worker.port))
    for _ in range(3):
        assert (await env.client.get("/", headers=H)).status_code == 200
    assert env.api.calls["demo/c1"] == 0


@pytest.mark.asyncio
async def test_without_database_nothing_is_cached(start_router) -> None:
    env = await start_router()
    for _ in range(3):
        assert (await env.client.get("/", headers=H)).status_code == 200
    assert env.api.calls["demo/c1"] == 3
    assert len(env.router.cache) == 0


@pytest.mark.asyncio
async def test_resumed_worker_unreachable_is_502(start_router) -> None:
    env = await start_router()
    env.api.worker_port = free_port()
    resp = await env.client.get("/", headers=H)
    assert resp.status_code == 502
    assert "demo/c1" in resp.text


@pytest.mark.asyncio
async def test_worker_error_status_is_relayed(start_router) -> None:
    env = await start_router()
    resp = await env.client.get("/download?n=notanumber", headers=H)
    assert resp.status_code == 500  # the worker's own answer, relayed as is


@pytest.mark.asyncio
async def test_head_request(start_router) -> None:
    env = await start_router()
    resp = await env.client.head("/", headers=H)
    assert resp.status_code == 200
    assert resp.content == b""


def test_httpx_import() -> None:
    assert httpx.Limits(max_keepalive_connections=0).max_keepalive_connections == 0
