"""The drain of an actor before its checkpoint, on one router replica (router.core.drain,
router.core.registration): requests in flight finish (or are cut at --drain-timeout), new ones are
held and served after the resume, an upstream looked up before the drain is never used, the
drain is acknowledged to the API only after all that, and a replica without a lease sends
nothing to workers. Both data paths (the nginx one carries drains out in nginx:
router.nginx.drain)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

import httpx
import pytest

from router.core.metrics import DRAIN_HELD
from tests.router.router_harness import Step, working_worker

H = {"ate-target-actor": "demo/c1"}
KEY = "demo/c1"
DATA_PATHS = ("python", "nginx")


async def until(predicate: Callable[[], bool | Awaitable[bool]], seconds: float = 10.0) -> None:
    for _ in range(int(seconds / 0.01)):
        value = predicate()
        if await value if inspect.isawaitable(value) else value:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met in time")


async def in_flight(env, key: str = KEY) -> int:
    """Requests of ``key`` sending to its worker now (nginx's own count on the nginx data path)."""
    if env.data_path == "nginx":
        return await env.router.in_flight(key)
    return env.router.core.drains.in_flight(key)


def in_flight_is(env, count: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await in_flight(env) == count

    return check


async def last_outcome(env, path: str) -> tuple[str, int, str]:
    """The newest of ``path``'s requests in the recent list (nginx lists one once it logged it)."""
    for _ in range(1000):
        recent = await env.router.admin.recent() if env.data_path == "nginx" else env.router.core.recent.items()
        found = [(r.path, r.status, r.outcome) for r in recent if r.path == path]
        if found:
            return found[0]
        await asyncio.sleep(0.01)
    raise AssertionError(f"no request of {path} listed")


@pytest.mark.asyncio
async def test_requests_in_flight_finish_before_the_drain_is_acknowledged(start_router) -> None:
    env = await start_router()
    replica = env.router.core.registration.replica
    assert env.api.heartbeats[replica] >= 1  # registered before serving
    flying = [asyncio.create_task(env.client.get("/sleep", params={"s": "1"}, headers=H)) for _ in range(5)]
    await until(in_flight_is(env, 5))
    acks_at_end: list[list[tuple[str, int]]] = []

    async def watch_responses() -> list[httpx.Response]:
        done = await asyncio.gather(*flying)
        acks_at_end.append(list(env.api.acks))  # what the API had heard when the last one ended
        return done

    responses = asyncio.create_task(watch_responses())
    env.router.core.registration.on_notification(f"7 {KEY}")  # as NOTIFY ate_router_drains brings it
    await until(lambda: (replica, 7) in env.api.acks)
    assert [(r.status_code, r.text) for r in await responses] == [(200, "late\n")] * 5  # none cut short
    assert acks_at_end == [[]]  # the acknowledgement came after every response ended
    assert await in_flight(env) == 0


@pytest.mark.asyncio
async def test_a_drain_listed_by_the_heartbeat_is_carried_out_and_acknowledged_once(start_router) -> None:
    env = await start_router()
    replica = env.router.core.registration.replica
    env.api.drains.append((3, KEY))
    await env.router.core.registration._beat()  # the next heartbeat lists it
    await until(lambda: (replica, 3) in env.api.acks)
    await env.router.core.registration._beat()  # acknowledged: not listed again, nothing re-run
    await asyncio.sleep(0.05)
    assert env.api.acks == [(replica, 3)]



@pytest.mark.asyncio
async def test_a_stopping_replica_gives_its_lease_back_after_its_requests_finished(start_router) -> None:
    env = await start_router()
    registration = env.router.core.registration
    assert registration.leased() and env.api.released == []
    await registration.stop()
    assert env.api.released == [registration.replica]  # drains stop waiting for it at once
    assert not registration.leased()  # and it sends nothing more to a worker

@pytest.mark.asyncio
async def test_a_request_outlasting_the_drain_timeout_is_cut_off(start_router) -> None:
    env = await start_router(drain_timeout_seconds=0.3)
    received = b""

    async def stalled() -> None:
        nonlocal received
        async with env.client.stream("GET", "/stall", headers=H) as resp:
            assert resp.status_code == 200
            async for chunk in resp.aiter_raw():
                received += chunk

    request = asyncio.create_task(stalled())
    await until(lambda: received == b"first\n")
    outcome = await env.router.core.drains.drain(1, KEY)
    assert (outcome.result, outcome.waited_for, outcome.cut) == ("cut", 1, 1)
    with pytest.raises(httpx.RemoteProtocolError):  # truncated, never a wrong complete answer
        await request
    assert await in_flight(env) == 0  # its worker connection is closed
    assert await last_outcome(env, "/stall") == ("/stall", 200, "error")



@pytest.mark.asyncio
async def test_a_request_cut_before_its_answer_is_told_so_and_its_worker_connection_reset(start_router) -> None:
    # A worker still working on the request when the drain timeout ends: the client is told
    # why, and the worker's end of the connection is reset, not closed half-way (a gVisor
    # snapshot taken with a half-closed connection restores without a working listener:
    # tests/atelet/test_checkpoint_after_cut.py).
    env = await start_router(drain_timeout_seconds=0.3)
    worker = await working_worker()
    env.api.worker_port = worker.port
    try:
        request = asyncio.create_task(env.client.get("/work", headers=H))
        await until(in_flight_is(env, 1))
        outcome = await env.router.core.drains.drain(1, KEY)
        assert (outcome.result, outcome.waited_for, outcome.cut) == ("cut", 1, 1)
        response = await request
        assert await asyncio.wait_for(worker.ended, 10) == "reset"
    finally:
        worker.server.close()
    assert response.status_code == 503, response.text
    assert response.text == (
        "actor demo/c1 is being suspended and this request did not finish within the router's --drain-timeout, "
        "so it was cut off before the actor answered; send it again (the actor resumes at its next request), "
        "or raise --drain-timeout for requests that take longer\n"
    )
    assert response.headers["retry-after"] == "1"

@pytest.mark.asyncio
async def test_a_request_arriving_during_the_drain_is_held_then_served_after_the_resume(start_router) -> None:
    env = await start_router()
    slow = asyncio.create_task(env.client.get("/sleep", params={"s": "1"}, headers=H))
    await until(in_flight_is(env, 1))
    drain = asyncio.create_task(env.router.core.drains.drain(2, KEY))
    await until(lambda: env.router.core.drains.draining(KEY))
    calls_before = env.api.calls[KEY]
    held = asyncio.create_task(env.client.get("/x", headers=H))
    await until(lambda: DRAIN_HELD._value.get() == 1)
    assert env.api.calls[KEY] == calls_before  # held: not even a resume call yet
    assert (await slow).status_code == 200
    assert (await drain).result == "clean"
    answer = await held
    assert answer.status_code == 200 and answer.json()["path"] == "/x"
    assert env.api.calls[KEY] == calls_before + 1  # resumed after the drain
    assert await last_outcome(env, "/x") == ("/x", 200, "parked_ok")


@pytest.mark.asyncio
async def test_a_resume_answer_obtained_before_the_drain_is_never_used(start_router) -> None:
    env = await start_router()
    # The first resume call answers (after 0.5 s) with the address the actor had before the
    # drain; a request must look it up again rather than send there.
    env.api.script(KEY, Step(delay=0.5), Step())
    request = asyncio.create_task(env.client.get("/stale", headers=H))
    await until(lambda: env.api.in_flight[KEY] == 1)
    await env.router.core.drains.drain(4, KEY)  # nothing in flight to the worker yet: at once
    answer = await request
    assert answer.status_code == 200
    assert env.api.calls[KEY] == 2  # the answer from before the drain was dropped, asked again
    assert len(env.worker_log.client_ports) == 1  # and the worker got the request once


@pytest.mark.asyncio
async def test_a_drain_waits_for_a_request_still_sending_its_body_then_cuts_it(start_router) -> None:
    # The body streams to the worker as it arrives, so the request is in flight from its look-up
    # on: the drain waits for it, then cuts it; the client is told, the worker gets none of it.
    env = await start_router(drain_timeout_seconds=0.3)
    host, port = env.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"POST /upload HTTP/1.1\r\nHost: x\r\nate-target-actor: demo/c1\r\nContent-Length: 10\r\n\r\nabc")
        await writer.drain()
        await until(in_flight_is(env, 1))
        outcome = await asyncio.wait_for(env.router.core.drains.drain(7, KEY), 30)  # a hang fails the test
        assert (outcome.result, outcome.waited_for, outcome.cut) == ("cut", 1, 1)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    finally:
        writer.close()
    assert head.startswith(b"HTTP/1.1 503 "), head
    assert await in_flight(env) == 0


@pytest.mark.asyncio
@pytest.mark.python_data_path  # the flights of the Python proxy; nginx: test_router_nginx.py
async def test_a_token_from_before_a_drain_enters_no_flight(start_router) -> None:
    env = await start_router()
    gate = env.router.core.drains
    before = gate.token()
    await gate.drain(5, KEY)
    upstream = env.router.core.resumer  # any object will do as the upstream of a refused flight
    assert gate.enter(KEY, before, upstream) is None
    flight = gate.enter(KEY, gate.token(), upstream)
    assert flight is not None
    assert gate.enter("demo/other", before, upstream) is not None  # another actor is untouched
    gate.leave(flight)


@pytest.mark.asyncio
async def test_a_replica_without_a_lease_sends_nothing_to_workers(start_router) -> None:
    env = await start_router()
    env.api.refuse_heartbeats = True
    env.router.core.registration.lease_until = 0.0  # as when no heartbeat was answered for a lease
    answer = await env.client.get("/x", headers=H)
    assert answer.status_code == 503
    replica = env.router.core.registration.replica
    assert answer.text == (
        f"router replica {replica} has no lease with the control plane at {env.router.settings.api_server} "
        "(its heartbeats are not answered), so it sends no request to actor demo/c1; retry shortly\n"
    )
    assert env.worker_log.client_ports == []
    env.api.refuse_heartbeats = False
    await env.router.core.registration._beat()  # answered again: a lease again
    assert (await env.client.get("/x", headers=H)).status_code == 200


