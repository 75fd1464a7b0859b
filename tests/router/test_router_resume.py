"""Resume through the API: single flight, parking, error mapping, parking-lot bound."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from router.core import api_client as api
from router.core.metrics import RESUMES
from tests.router.router_harness import Step, free_port

H = {"ate-target-actor": "demo/c1"}
DATA_PATHS = ("python", "nginx")


async def counted(env, outcome: str, expected: float) -> bool:
    """Whether the data path's counter of ``outcome`` reaches ``expected`` (nginx counts in its
    log phase, right after the answer is sent: waited for, 5 s at most)."""
    for _ in range(500):
        if env.outcome_count(outcome) == expected:
            return True
        await asyncio.sleep(0.01)
    return False


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
    assert env.router.core.resumer.parked == 0
    # The budget handed to the API is the remaining budget, in whole seconds; the resume may wait
    # for room for the remaining budget (2 s less what passed before the call) less the 0.5 s the
    # "no room" answer needs to come back before the budget ends.
    [body] = env.api.bodies
    assert body["timeout_seconds"] == 2 and 1.0 < body["room_wait_seconds"] <= 1.5, body


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
        ([(b"ate-target-actor", "demü/c1".encode())], "'demü/c1'"),
    ],
)
async def test_bad_target_is_400_plain_text(start_router, headers, needle) -> None:
    env = await start_router()
    before = env.outcome_count("bad_target")
    resp = await env.client.get("/", headers=headers)
    assert resp.status_code == 400
    assert resp.headers["content-type"].startswith("text/plain")
    assert "retry-after" not in resp.headers
    assert needle in resp.text
    assert "Ã" not in resp.text  # UTF-8 shown as such, not as Latin-1 mojibake
    assert "expected" in resp.text
    assert resp.text.count("\n") == 1
    assert sum(env.api.calls.values()) == 0
    assert await counted(env, "bad_target", before + 1)


@pytest.mark.asyncio
async def test_unknown_actor_is_404(start_router) -> None:
    env = await start_router()
    env.api.script("demo/c1", Step(404, "NotFound", "actor demo/c1 not found"))
    resp = await env.client.get("/", headers=H)
    assert resp.status_code == 404
    # The API's text is not repeated, no API path is suggested, the CLI command is.
    assert resp.text == (
        "actor demo/c1 not found; create it with "
        "'ate create actor c1 -a demo --template <template>'\n"
    )
    assert resp.headers["content-type"].startswith("text/plain")
    assert "retry-after" not in resp.headers
    assert env.api.calls["demo/c1"] == 1


@pytest.mark.asyncio
async def test_unknown_atespace_is_404_saying_so(start_router) -> None:
    env = await start_router()
    env.api.script("nosuch/c1", Step(404, "NotFound", "atespace nosuch not found"))
    resp = await env.client.get("/", headers={"ate-target-actor": "nosuch/c1"})
    assert resp.status_code == 404
    assert resp.text == "atespace nosuch not found (see 'ate get atespaces')\n"
    assert "ate create actor" not in resp.text and "/v1/" not in resp.text
    assert "retry-after" not in resp.headers


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
    env = await start_router(parked_request_budget_seconds=1.0)  # 0.4 s: once too short for the first answer on a loaded CI machine
    env.api.script("demo/c1", Step(409, "OperationInProgress", "busy",
                                   details={"operation": "SuspendActor"}))
    resp = await env.client.get("/", headers=H)
    assert resp.status_code == 504
    assert "demo/c1" in resp.text and "SuspendActor" in resp.text
    assert resp.headers["retry-after"] == "1"


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
    assert resp.headers["retry-after"] == "1"
    assert 0.45 <= elapsed < 1.5
    calls = env.api.calls["demo/c1"]
    assert 3 <= calls <= 10  # backoff 50 ms x1.5 capped at 500 ms over 0.5 s
    assert RESUMES.labels("no_capacity")._value.get() - before == calls


UNREACHABLE = (
    "actor demo/c1 is UNREACHABLE: node n1 stopped answering 12 s ago; waiting up to 48 s more for it to return "
    "(then the actor is CRASHED)"
)


@pytest.mark.asyncio
async def test_an_unreachable_actor_is_parked_then_503_with_the_reason(start_router) -> None:
    env = await start_router(parked_request_budget_seconds=0.5)
    env.api.script("demo/c1", Step(503, "Unreachable", UNREACHABLE, details={"state": "UNREACHABLE", "node": "n1"}))
    resp = await env.client.get("/", headers=H)
    assert resp.status_code == 503
    assert resp.headers["content-type"].startswith("text/plain")
    assert resp.text == f"{UNREACHABLE}; retry later\n"  # the API's reason, once, with what to do
    assert resp.headers["retry-after"] == "2"
    assert env.api.calls["demo/c1"] >= 2  # asked again while parked: its node may return


@pytest.mark.asyncio
async def test_an_unreachable_actor_whose_node_returns_is_served(start_router) -> None:
    env = await start_router()
    waiting = Step(503, "Unreachable", UNREACHABLE)
    env.api.script("demo/c1", waiting, waiting, Step())  # the node answers again: RUNNING
    resp = await env.client.get("/back", headers=H)
    assert resp.status_code == 200, resp.text
    assert resp.json()["path"] == "/back"
    assert env.api.calls["demo/c1"] == 3


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
    assert resp.headers["retry-after"] == "2"
    assert env.router.core.resumer.in_flight("demo/c1")
    # The resume was not cancelled: the API call completes after the request gave up,
    # and a request arriving meanwhile attaches to it instead of starting another.
    follow = await env.client.get("/", headers=H)
    assert follow.status_code == 504
    await asyncio.sleep(0.6)
    assert env.api.completed["demo/c1"] == 1
    assert env.api.calls["demo/c1"] == 1
    assert not env.router.core.resumer.in_flight("demo/c1")


@pytest.mark.asyncio
async def test_failed_precondition_is_503_naming_state(start_router) -> None:
    env = await start_router()
    message = "actor demo/c1 cannot be resumed from state CRASHED (ResumeActor wants SUSPENDED)"
    env.api.script("demo/c1", Step(409, "FailedPrecondition", message,
                                   details={"state": "CRASHED"}))
    resp = await env.client.get("/", headers=H)
    assert resp.status_code == 503
    assert resp.text == message + "\n"  # the API's message, which names actor and state
    assert "retry-after" not in resp.headers
    assert env.api.calls["demo/c1"] == 1


@pytest.mark.asyncio
async def test_failed_precondition_state_missing_from_message_is_added(start_router) -> None:
    env = await start_router()
    env.api.script("demo/c1", Step(409, "FailedPrecondition", "actor demo/c1 cannot be resumed",
                                   details={"state": "CRASHED"}))
    resp = await env.client.get("/", headers=H)
    assert resp.status_code == 503
    assert resp.text == "actor demo/c1 cannot be resumed (state CRASHED)\n"
    assert "retry-after" not in resp.headers


@pytest.mark.asyncio
async def test_failed_precondition_without_state_prints_the_message_alone(start_router) -> None:
    env = await start_router()
    message = ("actor bad/f1 cannot be resumed yet: its template bad/web has no golden "
               "snapshot (phase Building)")
    env.api.script("bad/f1", Step(409, "FailedPrecondition", message,
                                  details={"template_phase": "Building"}))
    resp = await env.client.get("/", headers={"ate-target-actor": "bad/f1"})
    assert resp.status_code == 503
    assert resp.text == message + "\n"
    assert "unknown" not in resp.text
    assert "retry-after" not in resp.headers
    assert env.api.calls["bad/f1"] == 1


LABELS = ("no worker has room for actor demo/c1: no ACTIVE gvisor worker has the labels "
          "{'zone': 'mars'} the template and actor select; change the actor's worker_selector "
          "or label a worker pool")


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("status", "reason"),
    [(503, "NoMatchingWorker"), (409, "NoMatchingWorker")],
)
async def test_no_matching_worker_is_503_at_once(start_router, status, reason) -> None:
    env = await start_router(parked_request_budget_seconds=1.0)
    env.api.script("demo/c1", Step(status, reason, LABELS))
    started = time.monotonic()
    resp = await env.client.get("/", headers=H)
    assert resp.status_code == 503
    assert time.monotonic() - started < 0.5  # not parked until the budget ran out
    assert env.api.calls["demo/c1"] == 1
    assert resp.text == f"actor demo/c1 cannot be placed: {LABELS}\n"
    assert "retry" not in resp.text.replace("Retry", "retry").split(LABELS)[0]
    assert "retry-after" not in resp.headers


@pytest.mark.asyncio
async def test_api_unreachable_is_503(start_router) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    env = await start_router(api_server=dead, parked_request_budget_seconds=0.3)
    resp = await env.client.get("/", headers=H)
    assert resp.status_code == 503
    assert "unreachable" in resp.text and "demo/c1" in resp.text and dead in resp.text
    assert resp.headers["retry-after"] == "2"


@pytest.mark.asyncio
async def test_api_internal_error_is_503_after_budget(start_router) -> None:
    env = await start_router(parked_request_budget_seconds=0.3)
    env.api.script("demo/c1", Step(500, "Internal", "database is on fire"))
    resp = await env.client.get("/", headers=H)
    assert resp.status_code == 503
    assert "database is on fire" in resp.text
    assert resp.headers["retry-after"] == "2"


@pytest.mark.asyncio
async def test_parking_lot_is_bounded(start_router) -> None:
    env = await start_router(max_parked=2)
    env.api.default = Step(delay=0.4)
    slow = [
        asyncio.create_task(env.client.get("/", headers={"ate-target-actor": f"demo/a{i}"}))
        for i in range(2)
    ]
    await asyncio.sleep(0.15)
    assert env.router.core.resumer.parked == 2
    resp = await env.client.get("/", headers={"ate-target-actor": "demo/a9"})
    assert resp.status_code == 503
    assert "capacity" in resp.text and "demo/a9" in resp.text
    assert resp.headers["retry-after"] == "1"
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
    assert env.router.core.resumer.parked == 0


@pytest.mark.asyncio
async def test_two_target_headers_are_400_naming_both(start_router) -> None:
    env = await start_router()
    headers = [("ate-target-actor", "demo/c1"), ("ate-target-actor", "demo/c2")]
    resp = await env.client.get("/", headers=headers)
    assert resp.status_code == 400
    assert resp.text == (
        "duplicate ate-target-actor header: got 'demo/c1' and 'demo/c2'; send exactly one\n"
    )
    assert sum(env.api.calls.values()) == 0


@pytest.mark.asyncio
@pytest.mark.parametrize("value", [b"", b"   ", b" \t "])
async def test_empty_target_header_is_400_not_host(start_router, value) -> None:
    env = await start_router()
    # The Host names a valid actor, but an empty header must not fall through to it.
    # Raw socket: httpx refuses to send a whitespace-only header value.
    port = int(env.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nhost: c1.demo.actors.ate.local\r\n"
                 b"ate-target-actor:" + value + b"\r\nconnection: close\r\n\r\n")
    answer = await reader.read()
    writer.close()
    head, _, text = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert text.startswith(b"empty ate-target-actor header; expected <atespace>/<name>")
    assert sum(env.api.calls.values()) == 0


@pytest.mark.asyncio
async def test_non_utf8_target_header_is_echoed_readably(start_router) -> None:
    env = await start_router()
    resp = await env.client.get("/", headers=[(b"ate-target-actor", b"d\xfcmo/c1")])
    assert resp.status_code == 400
    assert "'d\ufffdmo/c1'" in resp.text  # Latin-1 byte not valid UTF-8: a replacement mark
    assert "Ã" not in resp.text and "ü" not in resp.text


@pytest.mark.parametrize(
    ("status", "reason", "message", "kind"),
    [
        (409, "NoMatchingWorker", "no ACTIVE worker has sandbox class kata", api.NO_MATCHING_WORKER),
        (503, "NoMatchingWorker", "whatever", api.NO_MATCHING_WORKER),
        (503, "NoCapacity", "no ACTIVE gvisor worker has the labels {} ...", api.NO_CAPACITY),  # reason, not text
        (503, "NoCapacity", "all 3 matching workers have every place taken", api.NO_CAPACITY),
        (409, "FailedPrecondition", "actor a/b cannot be resumed", api.FAILED_PRECONDITION),
        (409, "OperationInProgress", "busy", api.BUSY),
        (503, "Unreachable", "actor a/b is UNREACHABLE: node n1 stopped answering 3 s ago", api.ACTOR_UNREACHABLE),
    ],
)
def test_classify(status, reason, message, kind) -> None:
    reply = api.classify(status, {"reason": reason, "message": message})
    assert reply.kind == kind
    assert reply.message == message
    assert (kind in api.RETRYABLE) == (kind in (api.NO_CAPACITY, api.BUSY, api.ACTOR_UNREACHABLE))
