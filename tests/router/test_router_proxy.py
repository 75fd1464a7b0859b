"""Proxy mechanics: streaming bodies, header handling, no keep-alive to workers, retries."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os

import httpx
import pytest

from router.core.errors import RouteError
from router.core.upstream import Upstream
from router.python.proxy import open_upstream
from router.python.request_body import BodyStream
from router.python.upstream_client import new_upstream_client
from tests.router.router_harness import free_port, pattern, working_worker

H = {"ate-target-actor": "demo/c1"}
DATA_PATHS = ("python", "nginx")
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


async def _one_chunk():
    yield b"x"


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["get", "event-stream", "chunked"])
async def test_hop_by_hop_headers_dropped_and_forwarded_headers_added(start_router, how: str) -> None:
    # Also for what nginx relays to the Python router (a request asking for an event stream,
    # one with a chunked body): the same headers reach the worker.
    env = await start_router()
    extra = {"accept": "text/event-stream"} if how == "event-stream" else {}
    resp = await env.client.request(
        "POST" if how == "chunked" else "GET",
        "/echo",
        content=_one_chunk() if how == "chunked" else None,
        headers={
            **H,
            **extra,
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
    assert headers["x-forwarded-for"] == "127.0.0.1"  # the client is no trusted proxy: its claim is replaced
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
    cache = env.router.core.cache
    cache.enabled = True  # as if LISTEN were live
    cache.put(cache.begin("demo/c1"), Upstream("127.0.0.1", free_port()))
    resp = await env.client.get("/moved", headers=H)
    assert resp.status_code == 200, resp.text
    assert resp.json()["path"] == "/moved"
    assert env.api.calls["demo/c1"] == 1
    assert cache.get("demo/c1") == Upstream("127.0.0.1", env.worker.port)


@pytest.mark.asyncio
async def test_cached_actor_unreachable_is_resumed_again_and_gets_the_whole_body(start_router) -> None:
    # The refused connection carried no byte of the body: the retry sends all of it.
    env = await start_router()
    cache = env.router.core.cache
    cache.enabled = True  # as if LISTEN were live
    cache.put(cache.begin("demo/c1"), Upstream("127.0.0.1", free_port()))
    data = os.urandom(300_000)
    resp = await env.client.post("/echo-body", headers=H, content=data)
    assert resp.status_code == 200, resp.text
    assert resp.content == data
    assert env.api.calls["demo/c1"] == 1


@pytest.mark.asyncio
async def test_cache_hit_skips_the_api(start_router) -> None:
    env = await start_router()
    cache = env.router.core.cache
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
    assert len(env.router.core.cache) == 0


@pytest.mark.asyncio
async def test_resumed_worker_unreachable_is_502(start_router) -> None:
    env = await start_router()
    port = free_port()
    env.api.worker_port = port
    resp = await env.client.get("/", headers=H)
    assert resp.status_code == 502
    # No promise of recovery (the sandbox may be dead): where to look and how to revert.
    assert resp.text == (
        f"actor demo/c1 is RUNNING but its worker 127.0.0.1:{port} does not answer; if this "
        "persists, check 'ate describe actor c1 -a demo' or revert it with "
        "'ate revert actor c1 -a demo'\n"
    )
    assert "retry-after" not in resp.headers


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


@pytest.mark.asyncio
async def test_early_answer_without_reading_a_large_body_is_relayed(start_router) -> None:
    # The worker answers 413 before reading the body (HTTP allows it) and closes: the router
    # must relay that answer, not a 502, every time, whatever the body size or framing.
    env = await start_router()
    data = os.urandom(4 * MB5)

    async def chunks():
        for i in range(0, len(data), 256 * 1024):
            yield data[i : i + 256 * 1024]

    results = []
    for i in range(20):
        content = data if i % 2 == 0 else chunks()
        resp = await env.client.post("/early", headers=H, content=content)
        results.append((resp.status_code, resp.text))
    assert results == [(413, "too big, not read\n")] * 20
    assert await _no_worker_connections(env)
    # The router still works afterwards (the early answers left nothing behind).
    resp = await env.client.post("/upload", headers=H, content=b"x" * 100)
    assert resp.json()["size"] == 100


@pytest.mark.asyncio
async def test_early_answer_then_reset_is_relayed(start_router) -> None:
    # A raw upstream that reads only the request head, answers and closes at once: its
    # kernel resets the connection (unread data), so the answer races with the reset.
    env = await start_router()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nearly")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    cache = env.router.core.cache
    cache.enabled = True
    cache.put(cache.begin("demo/c1"), Upstream("127.0.0.1", port))
    try:
        statuses = []
        for _ in range(20):
            resp = await env.client.post("/", headers=H, content=b"z" * MB5)
            statuses.append((resp.status_code, resp.text))
        assert statuses == [(200, "early")] * 20
    finally:
        server.close()


@pytest.mark.asyncio
async def test_client_leaving_mid_upload_to_a_full_duplex_worker_closes_it(start_router) -> None:
    # /echo-body answers at once and streams the body back: the response is under way when
    # the client leaves mid-body; the router must not wait forever for the rest.
    env = await start_router()
    port = int(env.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /echo-body HTTP/1.1\r\nhost: x\r\nate-target-actor: demo/c1\r\n"
                 b"content-length: 10000000\r\n\r\n" + b"a" * 300_000)
    await writer.drain()
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
    await reader.readexactly(1000)  # the echo is flowing
    writer.close()
    assert await _no_worker_connections(env, timeout=3), "worker connection left open"


@pytest.mark.asyncio
async def test_client_leaving_before_the_answer_closes_the_worker_connection(start_router) -> None:
    env = await start_router()
    port = int(env.url.rsplit(":", 1)[1])
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /upload HTTP/1.1\r\nhost: x\r\nate-target-actor: demo/c1\r\n"
                 b"content-length: 10000000\r\n\r\n" + b"a" * 300_000)
    await writer.drain()
    for _ in range(100):  # wait until the worker got the request
        if env.worker.server.server_state.connections:
            break
        await asyncio.sleep(0.01)
    writer.close()
    assert await _no_worker_connections(env, timeout=3), "worker connection left open"


@pytest.mark.asyncio
async def test_a_client_leaving_before_the_answer_gets_its_worker_connection_reset(start_router) -> None:
    # Reset, never closed half-way: a gVisor checkpoint of a connection left half-closed in the
    # sandbox restores without a working listener (tests/atelet/test_checkpoint_after_cut.py).
    env = await start_router()
    worker = await working_worker()
    env.api.worker_port = worker.port
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", int(env.url.rsplit(":", 1)[1]))
        writer.write(b"GET /work HTTP/1.1\r\nhost: x\r\nate-target-actor: demo/c1\r\n\r\n")
        await writer.drain()
        await asyncio.wait_for(worker.got_head.wait(), 10)
        writer.close()
        assert await asyncio.wait_for(worker.ended, 10) == "reset"
    finally:
        worker.server.close()


@pytest.mark.asyncio
async def test_garbage_from_the_worker_is_502(start_router) -> None:
    env = await start_router()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"SPLAT\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    cache = env.router.core.cache
    cache.enabled = True
    cache.put(cache.begin("demo/c1"), Upstream("127.0.0.1", server.sockets[0].getsockname()[1]))
    try:
        resp = await env.client.get("/", headers=H)
        assert resp.status_code == 502
        assert "failed before answering" in resp.text
        assert "retry-after" not in resp.headers
    finally:
        server.close()


@pytest.mark.asyncio
async def test_request_h11_refuses_is_502_and_closes_the_connection() -> None:
    # Unreachable through uvicorn (it rejects such a header first), so driven directly: a
    # request the HTTP/1.1 client refuses to send, after the connection is made, is a 502.
    closed = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionResetError):  # an exchange that never began is reset
            await reader.read()  # the router closed the connection
        closed.set()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    scope = {"method": "GET", "path": "/", "query_string": b"", "headers": [(b"x-bad", b"a\x00b")]}

    messages = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict:  # as an ASGI server: the (empty) body, then nothing until a disconnect
        if messages:
            return messages.pop()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    client = new_upstream_client()
    try:
        with pytest.raises(RouteError) as failure:
            await open_upstream(client, scope, BodyStream(receive), Upstream("127.0.0.1", port), "demo/c1")
        assert failure.value.status == 502
        assert failure.value.outcome == "error"
        assert failure.value.message == (
            f"actor demo/c1 at 127.0.0.1:{port} failed before answering: Illegal header value b'a\\x00b'"
        )
        await asyncio.wait_for(closed.wait(), 3)
    finally:
        await client.aclose()
        server.close()
