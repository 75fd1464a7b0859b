"""WebSockets and event streams through the router: relayed both ways, refused as HTTP is,
delivered event by event, and ended cleanly when the router stops (a real `ate-router` process)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import pytest_asyncio
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from router.core.drain import DRAIN_REASON
from router.core.metrics import REQUESTS
from router.python.app import create_app
from router.python.sessions import GOING_AWAY, SHUTDOWN_REASON
from router.settings import RouterSettings
from tests.router.conftest import start_nginx
from tests.router.router_harness import DOMAIN, FakeApi, Step, free_port, serve
from tests.router.stream_worker import REFUSAL, StreamLog, event, stream_worker

ROOT = Path(__file__).resolve().parents[2]
TARGET = {"ate-target-actor": "demo/c1"}
EVENT_STREAM = {"accept": "text/event-stream"}  # as a browser's EventSource asks
HANG_GUARD_SECONDS = 30  # a test that would hang fails instead
pytestmark = pytest.mark.timeout(60)


@dataclass
class StreamEnv:
    """A router in front of the stream worker, with the API stand-in."""

    ws_url: str
    url: str
    api: FakeApi
    log: StreamLog
    app: Any


DATA_PATHS = ("python", "nginx")


@pytest_asyncio.fixture
async def env(data_path: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[StreamEnv]:
    """Worker (tests/router/stream_worker.py), stand-in API and router, all real uvicorn; or
    with the nginx data path, nginx and the control service (tests/router/conftest.py)."""
    log = StreamLog()
    async with contextlib.AsyncExitStack() as stack:
        worker = await stack.enter_async_context(serve(stream_worker(log)))
        api = FakeApi(worker.port)
        api_served = await stack.enter_async_context(serve(api.app))
        settings = RouterSettings(
            api_server=api_served.url, domain=DOMAIN, database_url=None, parked_request_budget_seconds=2.0
        )
        if data_path == "nginx":
            url, control, _log = await start_nginx(stack, [], settings, tmp_path_factory.mktemp("nginx"))
            app = SimpleNamespace(state=SimpleNamespace(router=control))
            yield StreamEnv(url.replace("http://", "ws://"), url, api, log, app)
            return
        app = create_app(settings)
        router = await stack.enter_async_context(serve(app, lifespan="on"))
        yield StreamEnv(f"ws://127.0.0.1:{router.port}", router.url, api, log, app)


def ws(url: str, path: str = "/echo", **kwargs: Any) -> Any:
    """A WebSocket client to ``path`` of the actor demo/c1 through the router at ``url``."""
    headers = {**TARGET, **kwargs.pop("headers", {})}
    return connect(url + path, additional_headers=headers, proxy=None, max_size=2**24, **kwargs)


async def test_messages_are_relayed_both_ways_as_sent(env: StreamEnv) -> None:
    async with ws(env.ws_url) as socket:
        await socket.send("hello")
        assert await socket.recv() == "hello"
        await socket.send(b"\x00\x01\xff")
        assert await socket.recv() == b"\x00\x01\xff"
        big = bytes(range(256)) * 8192  # 2 MiB: more than the websockets library's 1 MiB default
        await socket.send(big)
        assert await socket.recv() == big
        await socket.send("ünïcode ✓")
        assert await socket.recv() == "ünïcode ✓"


async def test_handshake_headers_as_for_http(env: StreamEnv) -> None:
    async with ws(
        env.ws_url, headers={"x-request-id": "req-42", "x-forwarded-for": "6.6.6.6", "cookie": "c=1"}
    ) as socket:
        assert socket.response is not None
        assert socket.response.headers["x-request-id"] == "req-42"
        assert socket.response.headers["set-cookie"] == "ws=1"  # the worker's own header
        await socket.send("headers")
        seen = json.loads(await socket.recv())
    names = [name for name, _ in seen]
    headers = dict(seen)
    assert headers["x-request-id"] == "req-42"
    assert headers["x-forwarded-for"] == "127.0.0.1"  # an untrusted client's own is replaced
    assert headers["x-forwarded-host"] == env.ws_url.removeprefix("ws://")
    assert headers["x-forwarded-proto"] == "http"
    assert headers["cookie"] == "c=1"
    assert "ate-target-actor" not in names
    assert names.count("sec-websocket-key") == 1 and names.count("host") == 1


async def test_subprotocol_negotiated_by_the_worker(env: StreamEnv) -> None:
    async with ws(env.ws_url, subprotocols=["chat.v1", "chat.v2"]) as socket:
        assert socket.subprotocol == "chat.v2"
    async with ws(env.ws_url, subprotocols=["chat.v1"]) as socket:
        assert socket.subprotocol is None
    async with ws(env.ws_url) as socket:
        assert socket.subprotocol is None
    assert env.log.offered == [["chat.v1", "chat.v2"], ["chat.v1"], []]


async def test_worker_close_code_and_reason_reach_the_client(env: StreamEnv) -> None:
    async with ws(env.ws_url) as socket:
        await socket.send("close:4321:bye now")
        with pytest.raises(ConnectionClosed) as closed:
            await socket.recv()
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4321, "bye now")


async def test_client_close_code_and_reason_reach_the_worker(env: StreamEnv) -> None:
    async with ws(env.ws_url) as socket:
        await socket.send("ping")
        assert await socket.recv() == "ping"
        await socket.close(4001, "client done")
    await env.log.closed.wait()
    assert env.log.closes == [(4001, "client done")]


async def test_unknown_actor_refused_with_the_routers_404_text(env: StreamEnv) -> None:
    env.api.script("demo/c1", Step(404, "NotFound", "actor demo/c1 not found"))
    with pytest.raises(InvalidStatus) as refused:
        async with ws(env.ws_url):
            pass
    response = refused.value.response
    assert response.status_code == 404
    assert response.body == (
        b"actor demo/c1 not found; create it with 'ate create actor c1 -a demo --template <template>'\n"
    )
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    async with httpx.AsyncClient() as client:  # the HTTP request gets the same answer
        http = await client.get(env.url + "/echo", headers=TARGET)
    assert (http.status_code, http.content) == (404, response.body)


async def test_no_target_refused_with_400(env: StreamEnv) -> None:
    with pytest.raises(InvalidStatus) as refused:
        async with connect(env.ws_url + "/echo", proxy=None):
            pass
    assert refused.value.response.status_code == 400
    assert b"ate-target-actor" in (refused.value.response.body or b"")


async def test_worker_refusal_relayed(env: StreamEnv) -> None:
    with pytest.raises(InvalidStatus) as refused:
        async with ws(env.ws_url, "/refuse"):
            pass
    assert refused.value.response.status_code == 403
    assert refused.value.response.body == REFUSAL


async def test_session_counted_and_listed_as_a_request(env: StreamEnv) -> None:
    # Without a database the router caches nothing: every request resumes its actor (parked).
    before = await counted(env, "parked_ok")
    async with ws(env.ws_url, headers={"x-request-id": "listed-1"}) as socket:
        await socket.send("x")
        assert await socket.recv() == "x"
    recent = env.app.state.router.core.recent
    while not any(r.request_id == "listed-1" for r in recent.items()):
        await asyncio.sleep(0.01)  # the router finishes its side just after the client's close
    entry = next(r for r in recent.items() if r.request_id == "listed-1")
    assert (entry.method, entry.path, entry.status, entry.outcome, entry.target) == (
        "WEBSOCKET",
        "/echo",
        101,
        "parked_ok",
        "demo/c1",
    )
    assert await counted(env, "parked_ok") == before + 1
    async with httpx.AsyncClient(base_url=env.url) as client:  # and /statusz lists it
        listed = (await client.get("/statusz", params={"format": "json"})).json()["recent"]
    assert [r["method"] for r in listed if r["request_id"] == "listed-1"] == ["WEBSOCKET"]


async def counted(env: StreamEnv, outcome: str) -> float:
    """Requests counted with ``outcome`` in ``ate_router_requests_total`` (on the nginx data
    path: nginx's counters with the relayed requests)."""
    router = env.app.state.router
    if hasattr(router, "metrics"):
        return float(await asyncio.to_thread(router.metrics.count, outcome))
    return float(REQUESTS.labels(outcome)._value.get())


async def test_client_leaving_while_parked_frees_its_slot(env: StreamEnv) -> None:
    env.api.script("demo/c1", Step(delay=20))
    resumer = env.app.state.router.core.resumer
    opening = asyncio.create_task(ws(env.ws_url).__aenter__())
    while resumer.parked != 1:
        await asyncio.sleep(0.01)
    opening.cancel()  # the client gives up: its TCP connection closes
    with contextlib.suppress(asyncio.CancelledError):
        await opening
    while resumer.parked != 0:
        await asyncio.sleep(0.01)
    assert env.api.in_flight["demo/c1"] == 1  # the resume it started goes on


async def test_event_stream_delivered_event_by_event(env: StreamEnv) -> None:
    async with httpx.AsyncClient(timeout=HANG_GUARD_SECONDS) as client:
        async with client.stream("GET", env.url + "/events?n=3", headers=TARGET) as resp:
            assert resp.headers["content-type"] == "text/event-stream"
            events = sse_events(resp)
            for i in (1, 2, 3):
                assert await anext(events) == event(i)
                assert env.log.produced == i  # the next one is not produced before we have this one
                env.log.acks.put_nowait(i)
            with pytest.raises(StopAsyncIteration):
                await anext(events)


async def sse_events(resp: httpx.Response) -> AsyncIterator[str]:
    """Each event of an event stream (the text before its blank line), as it arrives."""
    buffer = b""
    async for chunk in resp.aiter_raw():
        buffer += chunk
        while b"\n\n" in buffer:
            one, buffer = buffer.split(b"\n\n", 1)
            yield one.decode()


# ---------------------------------------------------------------------------- router restart


@pytest.mark.parametrize("path", ["python", "nginx"])
async def test_router_stop_closes_websockets_and_streams_cleanly(path: str) -> None:
    """SIGTERM to a real `ate-router` (either data path): its WebSocket gets close 1001 on both
    sides, its event stream ends cleanly, and a plain endless response is cut off (visibly
    incomplete) after the graceful period (--stop-grace 2); the process exits 0."""
    log = StreamLog()
    async with serve(stream_worker(log)) as worker, serve((api := FakeApi(worker.port)).app) as api_served:
        port, metrics = free_port(), free_port()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("ATE_DATABASE_URL", None)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "router", "--listen", f"127.0.0.1:{port}", "--metrics-listen",
            f"127.0.0.1:{metrics}", "--api-server", api_served.url, "--domain", DOMAIN, "--data-path", path,
            "--stop-grace", "2", cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        ready = f"router: ready on 127.0.0.1:{port}" + (" (nginx data path, 1 worker)" if path == "nginx" else "")
        try:
            async with asyncio.timeout(HANG_GUARD_SECONDS):
                assert proc.stdout is not None
                assert (await proc.stdout.readline()).decode().strip() == ready
                await _stop_while_open(f"127.0.0.1:{port}", proc, log)
                assert await proc.wait() == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert api.calls["demo/c1"] == 3  # the three exchanges each reached the actor


async def _stop_while_open(address: str, proc: asyncio.subprocess.Process, log: StreamLog) -> None:
    async with httpx.AsyncClient(base_url=f"http://{address}", headers=TARGET, timeout=HANG_GUARD_SECONDS) as client:
        socket: ClientConnection
        async with (
            ws(f"ws://{address}") as socket,
            client.stream("GET", "/events?n=0", headers=EVENT_STREAM) as stream,
            client.stream("GET", "/trickle") as trickle,
        ):
            await socket.send("before")
            assert await socket.recv() == "before"
            events = sse_events(stream)
            assert await anext(events) == event(1)
            chunks = trickle.aiter_raw()
            assert await anext(chunks) == b"first\n"

            proc.send_signal(signal.SIGTERM)

            with pytest.raises(ConnectionClosed) as closed:
                await socket.recv()
            assert closed.value.rcvd is not None
            assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (GOING_AWAY, SHUTDOWN_REASON)
            await log.closed.wait()
            assert log.closes == [(GOING_AWAY, SHUTDOWN_REASON)]  # the worker was told too
            with pytest.raises(StopAsyncIteration):  # the event stream ends, complete
                await anext(events)
            with pytest.raises(httpx.RemoteProtocolError):  # cut off: the client sees it incomplete
                await anext(chunks)
            await log.held_ended.wait()


async def test_a_drain_ends_the_actors_websocket_and_counts_it_as_in_flight(env: StreamEnv) -> None:
    """A WebSocket is a flight of the drain gate for its whole life: a drain of its actor ends it
    (1001 with the drain's reason) and finishes clean once it is gone; a new WebSocket after the
    drain reaches the actor again through a resume."""
    router = env.app.state.router
    async with ws(env.ws_url) as socket:
        await socket.send("ping")
        assert await socket.recv() == "ping"
        assert router.core.drains.in_flight("demo/c1") == 1
        calls = env.api.calls["demo/c1"]
        outcome = await asyncio.wait_for(router.core.drains.drain(9, "demo/c1"), HANG_GUARD_SECONDS)
        with pytest.raises(ConnectionClosed) as closed:
            await socket.recv()
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (GOING_AWAY, DRAIN_REASON)
    assert (outcome.result, outcome.cut) == ("clean", 0)
    assert router.core.drains.in_flight("demo/c1") == 0
    async with ws(env.ws_url) as socket:  # a new one after the drain
        await socket.send("again")
        assert await socket.recv() == "again"
    assert env.api.calls["demo/c1"] == calls + 1


async def test_a_drain_ends_the_actors_event_stream_at_once_and_cleanly(env: StreamEnv) -> None:
    """An event stream asked for as a browser's EventSource asks (``Accept: text/event-stream``)
    never ends on its own: a drain of its actor ends it at once with the end of its body (not
    cut at --drain-timeout), and the drain is clean."""
    router = env.app.state.router
    router.core.drains.drain_timeout_seconds = HANG_GUARD_SECONDS / 3  # a stream waited out would be cut: "cut"
    async with httpx.AsyncClient(timeout=HANG_GUARD_SECONDS) as client:
        async with client.stream("GET", env.url + "/events?n=0", headers={**TARGET, **EVENT_STREAM}) as resp:
            events = sse_events(resp)
            assert await anext(events) == event(1)
            outcome = await asyncio.wait_for(router.core.drains.drain(9, "demo/c1"), HANG_GUARD_SECONDS)
            with pytest.raises(StopAsyncIteration):  # the stream ends, complete
                await anext(events)
    assert (outcome.result, outcome.waited_for, outcome.cut) == ("clean", 1, 0)
