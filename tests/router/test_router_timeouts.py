"""The router's timeouts, each with its flag: connect, response head, idle (both ways), whole
request; and a parked client that leaves frees its place in the parking lot at once.

On both data paths, except what nginx cannot express: it has one timeout between two reads from
the worker (the response head included), so the response head and idle timeouts of a worker are
the Python path's alone (router/nginx/config.py)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import httpx
import pytest

from router.core.metrics import PARKED
from tests.router.router_harness import Step

H = {"ate-target-actor": "demo/c1"}
DATA_PATHS = ("python", "nginx")


def outcomes(env) -> list[tuple[str, int, str]]:
    """(path, status, outcome) of the requests the router finished, oldest first (/statusz's list)."""
    return [(r.path, r.status, r.outcome) for r in reversed(env.router.core.recent.items())]


async def listed(env, count: int = 1) -> list[tuple[str, int, str]]:
    """(path, status, outcome) of the requests the router finished, oldest first, as its
    `/statusz?format=json` lists them (on both data paths; a data path lists a request just
    after its client saw the end, so this waits a little for `count` of them)."""
    recent: list[dict] = []
    for _ in range(200):
        recent = (await env.client.get("/statusz", params={"format": "json"})).json()["recent"]
        if len(recent) >= count:
            break
        await asyncio.sleep(0.01)
    return [(r["path"], r["status"], r["outcome"]) for r in reversed(recent)]


async def until(predicate, seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met in time")


@pytest.mark.asyncio
async def test_a_worker_slow_to_start_answering_gets_504_after_the_response_head_timeout(start_router) -> None:
    env = await start_router(response_head_timeout_seconds=0.3)
    resp = await env.client.get("/sleep", params={"s": "3"}, headers=H)
    assert resp.status_code == 504
    assert resp.text == (
        f"actor demo/c1 at 127.0.0.1:{env.worker.port} sent no response head within 0.3s; retry, or raise "
        "the router's --response-head-timeout if it needs longer\n"
    )
    assert (await listed(env))[-1] == ("/sleep", 504, "timeout")
    fast = await env.client.get("/sleep", params={"s": "0.05"}, headers=H)  # within it: answered
    assert (fast.status_code, fast.text) == (200, "late\n")


@pytest.mark.asyncio
async def test_a_worker_silent_mid_response_is_cut_off_after_the_idle_timeout(start_router) -> None:
    env = await start_router(idle_timeout_seconds=0.3)
    received = b""
    with pytest.raises(httpx.RemoteProtocolError):  # the chunked response never ends: truncated
        async with env.client.stream("GET", "/stall", headers=H) as resp:
            assert resp.status_code == 200
            async for chunk in resp.aiter_raw():
                received += chunk
    assert received == b"first\n"
    assert (await listed(env))[-1] == ("/stall", 200, "timeout")


@pytest.mark.asyncio
async def test_a_stream_that_never_goes_silent_is_cut_off_by_the_request_timeout(start_router) -> None:
    env = await start_router(idle_timeout_seconds=5, request_timeout_seconds=0.6)
    received = b""
    with pytest.raises(httpx.RemoteProtocolError):
        async with env.client.stream("GET", "/drip", headers=H) as resp:
            async for chunk in resp.aiter_raw():
                received += chunk
    # a byte every 50 ms for at most 0.6 s (the park and connect included): far fewer than the 200 it would send
    assert 1 <= len(received) <= 13, len(received)
    assert (await listed(env))[-1] == ("/drip", 200, "timeout")


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "framing", [b"Content-Length: 10\r\n\r\nabc", b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"], ids=["length", "chunked"]
)
async def test_a_client_whose_body_stalls_gets_408_after_the_idle_timeout(start_router, framing: bytes) -> None:
    env = await start_router(idle_timeout_seconds=0.3)
    host, port = env.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"POST /upload HTTP/1.1\r\nHost: x\r\nate-target-actor: demo/c1\r\n" + framing)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        body = await asyncio.wait_for(reader.read(1000), 10)
        # then the connection ends: the rest of the body must not be read as a next request
        rest = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    assert rest == b""
    assert head.startswith(b"HTTP/1.1 408 ")
    assert body == (
        b"the request body stalled: no byte for 0.3s (idle timeout); send the body without pauses, "
        b"or raise the router's --idle-timeout\n"
    )
    assert (await listed(env))[-1] == ("/upload", 408, "timeout")


@contextlib.contextmanager
def listener_that_never_accepts() -> Iterator[int]:
    """A port whose accept queue is full: a new connection's SYN is dropped, so connect hangs."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):  # fill the queue (backlog 0 still admits one or two)
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        yield port
    finally:
        for filler in fillers:
            filler.close()
        server.close()


@pytest.mark.asyncio
async def test_a_worker_that_does_not_accept_is_502_after_the_connect_timeout(start_router) -> None:
    env = await start_router(upstream_connect_timeout_seconds=0.3)
    with listener_that_never_accepts() as port:
        env.api.worker_port = port  # the actor's template now says it listens there
        started = asyncio.get_running_loop().time()
        resp = await env.client.get("/", headers=H)
        waited = asyncio.get_running_loop().time() - started
    assert resp.status_code == 502
    assert resp.text.startswith(f"actor demo/c1 is RUNNING but its worker 127.0.0.1:{port} does not answer")
    print(f"connect timeout 0.3 s: answered after {waited:.2f} s")


@pytest.mark.asyncio
async def test_a_parked_client_that_leaves_frees_its_place_at_once_and_the_resume_goes_on(start_router) -> None:
    env = await start_router(parked_request_budget_seconds=5)
    env.api.script("demo/c1", Step(delay=1.5))
    gauge_before = PARKED._value.get()
    with pytest.raises(httpx.ReadTimeout):
        await env.client.get("/", headers=H, timeout=0.2)  # the client gives up while parked
    await until(lambda: env.router.core.resumer.parked == 0)
    assert env.api.completed["demo/c1"] == 0  # freed before the resume answered...
    assert PARKED._value.get() == gauge_before  # ...and the gauge says so
    assert (await listed(env))[-1] == ("/", 0, "client_gone")
    await until(lambda: env.api.completed["demo/c1"] == 1)  # the resume it started went on
    assert env.api.calls["demo/c1"] == 1


@pytest.mark.asyncio
async def test_a_parked_client_with_a_body_that_stays_is_served_with_its_body(start_router) -> None:
    env = await start_router()
    env.api.script("demo/c1", Step(delay=0.3))
    resp = await env.client.post("/upload", content=b"x" * 100_000, headers=H)  # read ahead while parked
    assert resp.status_code == 200
    assert resp.json()["size"] == 100_000
    assert (await listed(env))[-1] == ("/upload", 200, "parked_ok")


@pytest.mark.asyncio
async def test_outcomes_ok_parked_ok_not_found_and_no_room(start_router, database_url) -> None:
    env = await start_router(database_url=database_url)
    await asyncio.wait_for(env.router.core.invalidator.connected.wait(), 10)
    assert (await env.client.get("/a", headers=H)).status_code == 200  # resumed: parked
    assert (await env.client.get("/b", headers=H)).status_code == 200  # cached: straight through
    # deleted after the access gate looked it up (an unknown actor is refused by the gate first)
    env.api.script("demo/gone", Step(404, "NotFound", "actor demo/gone not found"))
    assert (await env.client.get("/c", headers={"ate-target-actor": "demo/gone"})).status_code == 404
    env.api.script("demo/big", Step(503, "NoMatchingWorker", "no worker has room for the actor: 2 workers: 2 UNAVAILABLE"))
    assert (await env.client.get("/d", headers={"ate-target-actor": "demo/big"})).status_code == 503
    assert [o[2] for o in (await listed(env, 4))[-4:]] == ["parked_ok", "ok", "not_found", "no_room"]
