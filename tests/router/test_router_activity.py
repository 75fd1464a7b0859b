"""The router's side of idleness (issue 27), on both data paths: each replica reports the actors
with traffic on it in its heartbeat's ``active`` (router.core.activity, router.core.registration;
nginx's own requests through its admin server's /active), the API sets their ``last_active_at``
in the store (the real route on real PostgreSQL), and an idle action's drain (``if_idle``) is
refused busy by a replica with a request of the actor in flight, which then completes uncut."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

import router.core.activity
from api.app import authenticator_for
from api.errors import install_error_handlers
from api.routes import routers as routers_routes
from api.settings import ApiSettings
from domain.refs import ActorRef
from router.core.metrics import DRAINS
from store import Store
from tests.activities.test_store import SPEC
from tests.conftest import fresh_database
from tests.credentials import BOOTSTRAP_TOKEN
from tests.router import test_router_websocket
from tests.router.router_harness import FakeApi, Step
from tests.router.stream_worker import event
from tests.router.test_router_drain import in_flight_is, until
from tests.router.test_router_websocket import EVENT_STREAM, StreamEnv, sse_events, ws

env = test_router_websocket.env
"""The stream worker's router (fixture ``env``: both data paths, WebSockets and event streams)."""

H = {"ate-target-actor": "demo/c1"}
KEY = "demo/c1"
DATA_PATHS = ("python", "nginx")
pytestmark = pytest.mark.timeout(60)


async def beat(env: Any) -> list[str]:
    """One heartbeat of the replica now; the ``active`` keys it sent."""
    api: FakeApi = env.api
    registration = env.app.state.router.core.registration
    sent = len(api.active)
    await registration._beat()
    mine = [keys for replica, keys in api.active[sent:] if replica == registration.replica]
    return mine[-1]


@pytest.fixture
def quick_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream is silent after 0.2 s without a byte (not 2 s), and marks every 0.05 s."""
    monkeypatch.setattr(router.core.activity, "STREAM_QUIET_SECONDS", 0.2)
    monkeypatch.setattr(router.core.activity, "MARK_SECONDS", 0.05)


# ---------------------------------------------------------------------------- heartbeats


@pytest.mark.asyncio
async def test_a_request_in_flight_keeps_its_actor_in_the_next_heartbeat(start_router) -> None:
    env = await start_router()
    request = asyncio.create_task(env.client.get("/sleep", params={"s": "1"}, headers=H))
    await until(in_flight_is(env, 1))
    assert KEY in await beat(env)  # in flight now
    assert KEY in await beat(env)  # still in flight: every heartbeat while it runs
    assert (await request).status_code == 200
    await beat(env)  # (its end marked it once more)
    assert KEY not in await beat(env)  # nothing since


@pytest.mark.asyncio
async def test_a_request_that_came_and_went_between_heartbeats_is_reported_once(start_router) -> None:
    env = await start_router()
    await beat(env)
    assert (await env.client.get("/", headers=H)).status_code == 200
    assert (await env.client.get("/", headers={"ate-target-actor": "demo/c2"})).status_code == 200
    assert {KEY, "demo/c2"} <= set(await beat(env))
    assert not {KEY, "demo/c2"} & set(await beat(env))


@pytest.mark.asyncio
async def test_keys_not_taken_by_the_api_go_with_the_next_heartbeat(start_router) -> None:
    env = await start_router()
    await beat(env)
    assert (await env.client.get("/", headers=H)).status_code == 200
    env.api.refuse_heartbeats = True
    await env.app.state.router.core.registration._beat()  # refused: nothing recorded
    env.api.refuse_heartbeats = False
    assert KEY in await beat(env)


def with_real_routers(store: Store) -> Callable[[FakeApi], FastAPI]:
    """The API stand-in with the real /v1/routers routes (api.routes.routers) in front, on
    ``store``, the router authenticating with the bootstrap token."""

    def wrap(fake: FakeApi) -> FastAPI:
        app = FastAPI()
        install_error_handlers(app)
        app.include_router(routers_routes.router)
        app.router.routes.extend(fake.app.router.routes)
        app.state.store = store
        app.state.authenticator = authenticator_for(ApiSettings(bootstrap_token=BOOTSTRAP_TOKEN), store)
        return app

    return wrap


@contextlib.asynccontextmanager
async def actor_store(database_url: str) -> AsyncIterator[Store]:
    """A fresh database on the router tests' server, with actor demo/c1 idle for an hour."""
    async with fresh_database(database_url) as url:
        store = await Store.connect(url, min_size=1, max_size=4)
        try:
            from domain.templates import ActorTemplateSpec

            await store.atespaces.create("demo")
            await store.templates.create("demo", "counter", ActorTemplateSpec.from_document(dict(SPEC)))
            await store.actors.create(ActorRef("demo", "c1"), "counter", {})
            await store.pool.execute("UPDATE actors SET last_active_at = now() - interval '1 hour'")
            yield store
        finally:
            await store.close()


async def idle_seconds(store: Store) -> float:
    value = await store.pool.fetchval(
        "SELECT extract(epoch FROM now() - last_active_at) FROM actors WHERE atespace = 'demo' AND name = 'c1'"
    )
    return float(value)


@pytest.mark.asyncio
async def test_traffic_through_a_second_replica_refreshes_last_active_at(start_router, database_url: str) -> None:
    async with actor_store(database_url) as store:
        first = await start_router(api_app=with_real_routers(store), api_token=BOOTSTRAP_TOKEN)
        second = await start_router(api_server=first.api_url, api_token=BOOTSTRAP_TOKEN)
        await first.app.state.router.core.registration._beat()
        assert await idle_seconds(store) > 3000  # registered, no traffic yet
        assert (await second.client.get("/", headers=H)).status_code == 200  # through the second only
        await first.app.state.router.core.registration._beat()
        assert await idle_seconds(store) > 3000  # the first replica saw nothing
        await second.app.state.router.core.registration._beat()
        assert await idle_seconds(store) < 60  # the second's heartbeat touched it
        replicas = {r.name for r in await store.router_drains.replicas()}
        assert {first.router.core.registration.replica, second.router.core.registration.replica} <= replicas


@pytest.mark.asyncio
async def test_the_api_refuses_active_keys_that_name_no_actor(database_url: str) -> None:
    async with actor_store(database_url) as store:
        app = with_real_routers(store)(FakeApi(1))
        headers = {"Authorization": f"Bearer {BOOTSTRAP_TOKEN}"}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
            for bad in (["demo"], ["Demo/c1"], ["demo/c1/x"], ["demo/" + "a" * 64], [KEY] * 2001):
                resp = await client.put("/v1/routers/r1", json={"active": bad}, headers=headers)
                assert resp.status_code == 400, bad
                assert "active" in resp.text
            resp = await client.put("/v1/routers/r1", json={"active": [KEY, "demo/unknown", KEY]}, headers=headers)
            assert resp.status_code == 200
            assert resp.json()["touched"] == 1  # an unknown actor is skipped
            assert await idle_seconds(store) < 60


# ---------------------------------------------------------------------------- streams


async def stream_beat(env: StreamEnv) -> list[str]:
    return await beat(env)


@pytest.mark.asyncio
async def test_a_websocket_moving_bytes_is_reported_and_a_silent_one_is_not(env: StreamEnv, quick_streams: None) -> None:
    async with ws(env.ws_url) as socket:
        await socket.send("hello")
        assert await socket.recv() == "hello"
        assert KEY in await stream_beat(env)  # opened, moved bytes
        await asyncio.sleep(0.3)
        await stream_beat(env)
        assert KEY not in await stream_beat(env)  # open but silent
        await asyncio.sleep(0.1)
        await socket.send("again")
        assert await socket.recv() == "again"
        assert KEY in await stream_beat(env)  # moving bytes again


@pytest.mark.asyncio
async def test_with_the_setting_a_silent_websocket_keeps_its_actor_awake(env: StreamEnv, quick_streams: None) -> None:
    env.app.state.router.core.activity.open_streams_keep_awake = True
    async with ws(env.ws_url) as socket:
        await socket.send("hello")
        assert await socket.recv() == "hello"
        await asyncio.sleep(0.3)
        await stream_beat(env)
        assert KEY in await stream_beat(env)  # silent, but open: in flight
        registration = env.app.state.router.core.registration
        registration.on_notification(f"11:idle {KEY}")
        await until(lambda: (registration.replica, 11) in env.api.acks)
        assert (registration.replica, 11) in env.api.busy  # the stream holds it: refused
        await socket.send("still here")
        assert await socket.recv() == "still here"  # not closed


@pytest.mark.asyncio
async def test_an_idle_drain_closes_a_silent_websocket_with_the_drains_reason(env: StreamEnv, quick_streams: None) -> None:
    async with ws(env.ws_url) as socket:
        await socket.send("hello")
        assert await socket.recv() == "hello"
        await asyncio.sleep(0.3)
        registration = env.app.state.router.core.registration
        registration.on_notification(f"12:idle {KEY}")
        await until(lambda: (registration.replica, 12) in env.api.acks)
        assert env.api.busy == []  # silent: drained
        await socket.wait_closed()
        assert socket.close_code == 1001
        assert "suspended" in (socket.close_reason or "")


@pytest.mark.asyncio
async def test_an_event_stream_is_reported_while_it_moves_bytes_and_not_while_silent(
    env: StreamEnv, quick_streams: None
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        async with client.stream("GET", env.url + "/events?n=2", headers={**H, **EVENT_STREAM}) as resp:
            events = sse_events(resp)
            assert await anext(events) == event(1)
            assert KEY in await stream_beat(env)
            await asyncio.sleep(0.3)
            await stream_beat(env)
            assert KEY not in await stream_beat(env)  # open, silent
            env.log.acks.put_nowait(1)  # the worker sends event 2
            assert await anext(events) == event(2)
            assert KEY in await stream_beat(env)
            env.log.acks.put_nowait(2)


# ---------------------------------------------------------------------------- idle drains


@pytest.mark.asyncio
async def test_an_idle_drain_with_a_request_in_flight_is_acknowledged_busy_and_the_request_completes(
    start_router,
) -> None:
    env = await start_router(drain_timeout_seconds=0.2)  # an ordinary drain would cut it
    registration = env.router.core.registration
    drains_before = DRAINS.labels("clean")._value.get() + DRAINS.labels("cut")._value.get()
    request = asyncio.create_task(env.client.get("/sleep", params={"s": "1"}, headers=H))
    await until(in_flight_is(env, 1))
    registration.on_notification(f"7:idle {KEY}")  # as NOTIFY ate_router_drains brings it
    await until(lambda: (registration.replica, 7) in env.api.acks)
    assert env.api.busy == [(registration.replica, 7)]
    assert not request.done()  # acknowledged at once, while the request runs
    assert not env.router.core.drains.draining(KEY)  # nothing held
    response = await request
    assert (response.status_code, response.text) == (200, "late\n")  # uncut
    assert DRAINS.labels("clean")._value.get() + DRAINS.labels("cut")._value.get() == drains_before
    calls = env.api.calls[KEY]
    assert (await env.client.get("/", headers=H)).status_code == 200
    if env.router.core.cache.enabled:
        assert env.api.calls[KEY] == calls  # still cached: nothing was drained


@pytest.mark.asyncio
async def test_an_idle_drain_without_a_request_in_flight_drains_as_before(start_router) -> None:
    env = await start_router()
    registration = env.router.core.registration
    assert (await env.client.get("/", headers=H)).status_code == 200
    clean = DRAINS.labels("clean")._value.get()
    env.api.drains.append((8, KEY))
    env.api.idle_drains.add(8)
    await registration._beat()  # listed by the heartbeat, if_idle
    await until(lambda: (registration.replica, 8) in env.api.acks)
    assert env.api.busy == []
    assert DRAINS.labels("clean")._value.get() == clean + 1
    calls = env.api.calls[KEY]
    assert (await env.client.get("/", headers=H)).status_code == 200  # served after a resume
    assert env.api.calls[KEY] == calls + 1
    await registration._beat()  # acknowledged: not run again
    assert env.api.acks.count((registration.replica, 8)) == 1


@pytest.mark.asyncio
async def test_an_idle_drain_refused_busy_is_acknowledged_busy_again_when_listed_again(start_router) -> None:
    env = await start_router()
    registration = env.router.core.registration
    request = asyncio.create_task(env.client.get("/sleep", params={"s": "1"}, headers=H))
    await until(in_flight_is(env, 1))
    registration.on_notification(f"9:idle {KEY}")
    await until(lambda: (registration.replica, 9) in env.api.acks)
    await request
    registration.dispatch(9, KEY, if_idle=True)  # listed again (its acknowledgement was lost)
    await until(lambda: env.api.acks.count((registration.replica, 9)) == 2)
    assert env.api.busy == [(registration.replica, 9)] * 2  # the same answer, not a drain now


@pytest.mark.asyncio
async def test_requests_parked_for_room_are_counted(start_router) -> None:
    from router.core.metrics import PARKED_NO_ROOM

    env = await start_router(parked_request_budget_seconds=1.0)
    env.api.script(KEY, Step(503, "NoCapacity", "no worker has room for the actor demo/c1"))
    before = PARKED_NO_ROOM._value.get()
    request = asyncio.create_task(env.client.get("/", headers=H))
    await until(lambda: PARKED_NO_ROOM._value.get() == before + 1)
    assert (await request).status_code == 503
    assert PARKED_NO_ROOM._value.get() == before


def test_the_open_streams_setting_comes_from_its_flag_or_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from router.main import build_settings, parse_args

    assert build_settings(parse_args([])).open_streams_keep_awake is False
    assert build_settings(parse_args(["--open-streams-keep-awake"])).open_streams_keep_awake is True
    monkeypatch.setenv("ATE_ROUTER_OPEN_STREAMS_KEEP_AWAKE", "true")
    assert build_settings(parse_args([])).open_streams_keep_awake is True
    assert build_settings(parse_args(["--no-open-streams-keep-awake"])).open_streams_keep_awake is False
