"""Resume through the API: single flight, parking, error mapping, parking-lot bound."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from router_harness import Step, free_port

from router.metrics import REQUESTS, RESUMES

H = {"ate-target-actor": "demo/c1"}


@pytest.mark.asyncio
async def test_twenty_concurrent_requests_cause_one_resume(start_router) -> None:
    env = await start_router()
    env.api.script("demo/c1", Step(delay=0.3))
    responses = await asyncio.gather(
        *(env.client.get(f"/hello/{i}", headers=H) for i in range(20))
    )
    assert env.api.calls["demo/c1"] == 1
    assert env.api.max_in_flight == 1
    assert env.api.template_calls == 1
    for i, resp in enumerate(responses):
        assert resp.status_code == 200, resp.text
        assert resp.json()["path"] == f"/hello/{i}"
    assert env.router.resumer.parked == 0
    # The budget handed to the API is the remaining budget, in whole seconds.
    assert env.api.bodies == [{"timeout_seconds": 2}]


@pytest.mark.asyncio
async def test_host_form_routes_to_the_actor(start_router) -> None:
    env = await start_router()
    resp = await env.client.get("/x?y=1", headers={"host": "c7.demo.actors.ate.local:8000"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["query"] == "y=1"
    assert env.api.calls["demo/c7"] == 1


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("headers", "needle"),
    [
        ({"ate-target-actor": "demo"}, "'demo'"),
        ({"ate-target-actor": "Demo/c1"}, "'Demo/c1'"),
        ({"host": "localhost"}, "'localhost'"),
        ({"host": "c1.demo.actors.other.local"}, "'c1.demo.actors.other.local'"),
    ],
)
async def test_bad_target_is_400_plain_text(start_router, headers, needle) -> None:
    env = await start_router()
    before = REQUESTS.labels("bad_target")._value.get()
    resp = await env.client.get("/", headers=headers)
    assert resp.status_code == 400
    assert resp.headers["content-type"].startswith("text/plain")
    assert needle in resp.text
    assert "expected" in resp.text
    assert resp.text.count("\n") == 1
    assert sum(env.api.calls.values()) == 0
    assert REQUESTS.labels("bad_target")._value.get() == before + 1


@pytest.mark.asyncio
async def test_unknown_actor_is_404(start_router) -> None:
    env = await start_router()
    env.api.script("demo/c1", Step(404, "NotFound", "actor demo/c1 not found"))
    resp = await env.client.get("/", headers=H)
    assert resp.status_code == 404
    assert "demo/c1" in resp.text and "not found" in resp.text
    assert resp.headers["content-type"].startswith("text/plain")
    assert env.api.calls["demo/c1"] == 1


@pytest.mark.asyncio
async def test_busy_actor_parks_then_succeeds(start_router) -> None:
    env = await start_router()
    busy = Step(409, "OperationInProgress", "another operation is in progress for this actor",
                details={"operation": "SuspendActor"})
    env.api.script("demo/c1", busy, busy, Step())
    resp = await env.client.get("/ok", headers=H)
    assert resp.status_code == 200, resp.text
    assert env.api.calls["demo/c1"] == 3


@pytest.mark.asyncio
async def test_busy_until_budget_is_504(start_router) -> None:
    env = await start_router(parked_request_budget_seconds=0.4)
    env.api.script("demo/c1", Step(409, "OperationInProgress", "busy",
                                   details={"operation": "SuspendActor"}))
    resp = await env.client.get("/", headers=H)
    assert resp.status_code == 504
    assert "demo/c1" in resp.text and "SuspendActor" in resp.text


@pytest.mark.asyncio
async def test_no_capacity_is_503_with_api_message_after_budget(start_router) -> None:
    env = await start_router(parked_request_budget_seconds=0.5)
    message = "no worker has room for the actor demo/c1: memory filter removed the last 3 workers"
    env.api.script("demo/c1", Step(503, "NoCapacity", message))
    before = RESUMES.labels("no_capacity")._value.get()
    started = time.monotonic()
    resp = await env.client.get("/", headers=H)
    elapsed = time.monotonic() - started
    assert resp.status_code == 503
    assert message in resp.text
    assert 0.45 <= elapsed < 1.5
    calls = env.api.calls["demo/c1"]
    assert 3 <= calls <= 10  # backoff 50 ms x1.5 capped at 500 ms over 0.5 s
    assert RESUMES.labels("no_capacity")._value.get() - before == calls


@pytest.mark.asyncio
async def test_no_capacity_then_room_succeeds(start_router) -> None:
    env = await start_router()
    full = Step(503, "NoCapacity", "no worker has room for the actor demo/c1: cpu")
    env.api.script("demo/c1", full, full, full, Step())
    resp = await env.client.get("/", headers=H)
    assert resp.status_code == 200
    assert env.api.calls["demo/c1"] == 4


@pytest.mark.asyncio
async def test_budget_exhausted_is_504_and_resume_continues(start_router) -> None:
    env = await start_router(parked_request_budget_seconds=0.3)
    env.api.script("demo/c1", Step(delay=0.8))
    started = time.monotonic()
    resp = await env.client.get("/", headers=H)
    assert resp.status_code == 504
    assert time.monotonic() - started < 0.7
    assert "demo/c1" in resp.text and "continues in the background" in resp.text
    assert env.router.resumer.in_flight("demo/c1")
    # The resume was not cancelled: the API call completes after the request gave up,
    # and a request arriving meanwhile attaches to it instead of starting another.
    follow = await env.client.get("/", headers=H)
    assert follow.status_code == 504
    await asyncio.sleep(0.6)
    assert env.api.completed["demo/c1"] == 1
    assert env.api.calls["demo/c1"] == 1
    assert not env.router.resumer.in_flight("demo/c1")


@pytest.mark.asyncio
async def test_failed_precondition_is_503_naming_state(start_router) -> None:
    env = await start_router()
    env.api.script("demo/c1", Step(409, "FailedPrecondition",
                                   "actor demo/c1 is not suspended (state: CRASHED)"))
    resp = await env.client.get("/", headers=H)
    assert resp.status_code == 503
    assert "CRASHED" in resp.text and "demo/c1" in resp.text
    assert env.api.calls["demo/c1"] == 1


@pytest.mark.asyncio
async def test_api_unreachable_is_503(start_router) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    env = await start_router(api_server=dead, parked_request_budget_seconds=0.3)
    resp = await env.client.get("/", headers=H)
    assert resp.status_code == 503
    assert "unreachable" in resp.text and "demo/c1" in resp.text and dead in resp.text


@pytest.mark.asyncio
async def test_api_internal_error_is_503_after_budget(start_router) -> None:
    env = await start_router(parked_request_budget_seconds=0.3)
    env.api.script("demo/c1", Step(500, "Internal", "database is on fire"))
    resp = await env.client.get("/", headers=H)
    assert resp.status_code == 503
    assert "database is on fire" in resp.text


@pytest.mark.asyncio
async def test_parking_lot_is_bounded(start_router) -> None:
    env = await start_router(max_parked=2)
    env.api.default = Step(delay=0.4)
    slow = [
        asyncio.create_task(env.client.get("/", headers={"ate-target-actor": f"demo/a{i}"}))
        for i in range(2)
    ]
    await asyncio.sleep(0.15)
    assert env.router.resumer.parked == 2
    resp = await env.client.get("/", headers={"ate-target-actor": "demo/a9"})
    assert resp.status_code == 503
    assert "capacity" in resp.text and "demo/a9" in resp.text
    assert [r.status_code for r in await asyncio.gather(*slow)] == [200, 200]
    assert env.api.calls["demo/a9"] == 0


@pytest.mark.asyncio
async def test_client_giving_up_does_not_cancel_the_resume(start_router) -> None:
    env = await start_router()
    env.api.script("demo/c1", Step(delay=0.4))
    with pytest.raises(httpx.ReadTimeout):
        await env.client.get("/", headers=H, timeout=0.1)
    await asyncio.sleep(0.5)
    assert env.api.completed["demo/c1"] == 1
    assert env.router.resumer.parked == 0
