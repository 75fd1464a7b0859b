"""A stall is not a crash: node loss measured on the clock with real processes (issue 12, "Nodes
come and go"; ARCHITECTURE.md "Actor states").

One stack of separate processes (PostgreSQL, Temporal dev server, api-server, worker, router, one
atelet `dur` with 2 workers on real runsc). The atelet's heartbeat (1 s) and the api-server's
lease (4 s) are the defaults; the grace is 20 s (`--unreachable-grace-seconds`, default 60) so the
stall that outlasts it takes 20 s, not a whole minute (still well past the issue's 16 s stall that
must not crash: the grace starts only when the lease lapses, 4-5 s into the stall). The router parks a request for 8 s.

Expected, from the state table and the issue:
- heartbeats stop (SIGSTOP or SIGKILL of the atelet) -> its workers UNAVAILABLE within 5 s (the
  issue's bound: lease 4 s + check 0.5 s after the last beat) and its RUNNING actor UNREACHABLE,
  not CRASHED; a request through the router is parked, then 503 naming the reason;
- the atelet back within the grace (SIGCONT; or a new atelet adopting the sandboxes a SIGKILL
  left) -> the actor RUNNING on the same worker, its memory intact: the counter
  (examples/counter) counts on from where it was (memory_count + 1 per request);
- a stall past the grace -> CRASHED; with `onCrash: Revert` the api-server reverts it to its last
  COMPLETED snapshot (SUSPENDED, the loss in its history and `ate_actor_recoveries_total`); the
  returning node's sandbox of it is terminated, never adopted; the next request resumes it from
  the snapshot (memory_count = the snapshot's + 1), in exactly one sandbox;
- a restart of the api-server (after a silence longer than the lease) or of the worker leaves no
  window without a candidate: a resume right after the restart succeeds and no node is lost.

Every time is measured and printed; the only bound asserted is the issue's 5 s.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import httpx
import pytest

from ate.cli.manifest import load_template_spec
from tests.durability.checks import ATESPACE
from tests.durability.conftest import running_stack
from tests.durability.harness import DEFAULT_ATELET, NODE, Stack
from tests.durability.processes import REPO

pytestmark = [pytest.mark.slow, pytest.mark.runsc]

GRACE_SECONDS = 20.0
LEASE_BOUND_SECONDS = 5.0
"""The issue's bound: a silent node's workers are UNAVAILABLE within 5 s by default."""
PARK_SECONDS = 8.0
"""The router's park budget: long enough for a resume from a snapshot through the router."""
OP_TIMEOUT = 90.0
T = TypeVar("T")


@pytest.fixture(scope="module")
def stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    failed_before = request.session.testsfailed
    with running_stack(
        (DEFAULT_ATELET,),
        keep_logs=lambda: request.session.testsfailed > failed_before,
        api_args=("--unreachable-grace-seconds", str(GRACE_SECONDS)),
        router_args=("--parked-request-budget", str(PARK_SECONDS)),
    ) as running:
        yield running


def make_template(stack: Stack, name: str, **extra: Any) -> None:
    assert stack.rest("POST", "/v1/atespaces", json={"name": ATESPACE}).status_code in (201, 409)
    spec = {**load_template_spec(REPO / "examples/counter/template.yaml"), **extra}
    created = stack.rest(
        "POST", f"/v1/atespaces/{ATESPACE}/templates?wait=true", timeout=180, json={"name": name, "spec": spec}
    )
    assert created.status_code == 201 and created.json()["phase"] == "Ready", created.text


def create(stack: Stack, template: str, name: str) -> None:
    created = stack.rest("POST", f"/v1/atespaces/{ATESPACE}/actors", json={"name": name, "template": template})
    assert created.status_code == 201, created.text


def act(stack: Stack, name: str, operation: str) -> httpx.Response:
    return stack.rest(
        "POST",
        f"/v1/atespaces/{ATESPACE}/actors/{name}/{operation}",
        timeout=OP_TIMEOUT + 30,
        json={"timeout_seconds": OP_TIMEOUT},
    )


def act_ok(stack: Stack, name: str, operation: str, state: str) -> None:
    response = act(stack, name, operation)
    assert response.status_code == 200, f"{operation} of {name}: {response.status_code} {response.text}"
    assert response.json()["state"] == state, response.text


def through_router(stack: Stack, name: str) -> httpx.Response:
    return httpx.get(f"{stack.router}/", headers={"ate-target-actor": f"{ATESPACE}/{name}"}, timeout=60)


def counted(stack: Stack, name: str) -> int:
    """One request through the router; the counter's memory_count after it."""
    response = through_router(stack, name)
    assert response.status_code == 200, response.text
    return int(response.json()["memory_count"])


def actor(stack: Stack, name: str) -> dict[str, Any]:
    [row] = stack.sql(
        "SELECT a.state, a.last_error, w.name AS worker, w.ip FROM actors a LEFT JOIN workers w ON w.id = a.worker_id "
        "WHERE a.atespace = $1 AND a.name = $2",
        ATESPACE,
        name,
    )
    return row


def in_state(stack: Stack, name: str, *states: str) -> dict[str, Any] | None:
    """The actor's row when it is in one of `states`, else None."""
    row = actor(stack, name)
    return row if row["state"] in states else None


def worker_states(stack: Stack) -> set[str]:
    return {r["state"] for r in stack.sql("SELECT state FROM workers WHERE node = $1", NODE)}


def operations(stack: Stack, name: str) -> list[dict[str, Any]]:
    return stack.sql(
        "SELECT operation, outcome, error FROM operations WHERE atespace = $1 AND actor = $2 ORDER BY started_at",
        ATESPACE,
        name,
    )


def sandboxes(stack: Stack) -> dict[str, tuple[str, str]]:
    """worker -> (actor key, sandbox_state) as the atelet's Health reports it over gRPC."""
    return {
        w.name: (f"{w.actor.atespace}/{w.actor.name}", w.sandbox_state) for w in stack.health().workers if w.actor.name
    }


def until(what: str, probe: Callable[[], T | None], timeout: float, since: float) -> tuple[T, float]:
    """Poll `probe` every 0.1 s until it gives a value; that value and the seconds since `since`
    (monotonic), printed."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            value = probe()
        except Exception as error:  # a part restarting: poll on
            value, last = None, error
        if value is not None:
            seconds = time.monotonic() - since
            print(f"\n  {what}: {seconds:.2f} s")
            return value, seconds
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout} s (last error: {last!r})")


def signal_atelet(stack: Stack, sig: signal.Signals) -> None:
    process = stack.parts[DEFAULT_ATELET.part].process
    assert process is not None
    os.kill(process.pid, sig)


def lost(stack: Stack, name: str, since: float) -> tuple[float, float]:
    """Wait for the node's workers UNAVAILABLE and the actor UNREACHABLE; their times."""
    _, unavailable = until("workers UNAVAILABLE", lambda: worker_states(stack) == {"UNAVAILABLE"} or None, 30, since)
    row, unreachable = until(f"{name} UNREACHABLE", lambda: in_state(stack, name, "UNREACHABLE", "CRASHED"), 30, since)
    assert row["state"] == "UNREACHABLE", row  # not CRASHED: a silent node is not a dead one
    assert row["worker"] is not None  # it keeps its worker
    assert row["last_error"].startswith(f"node {NODE} stopped answering"), row
    return unavailable, unreachable


@pytest.fixture(scope="module")
def counter(stack: Stack) -> str:
    make_template(stack, "counter")
    create(stack, "counter", "c1")
    act_ok(stack, "c1", "resume", "RUNNING")
    assert [counted(stack, "c1") for _ in range(3)] == [1, 2, 3]
    return "c1"


def test_a_stall_within_the_grace_keeps_the_actor_running_with_its_memory(stack: Stack, counter: str) -> None:
    home = actor(stack, counter)["worker"]
    stopped = time.monotonic()
    signal_atelet(stack, signal.SIGSTOP)
    try:
        unavailable, _ = lost(stack, counter, stopped)
        assert unavailable <= LEASE_BOUND_SECONDS

        parked = time.monotonic()
        response = through_router(stack, counter)  # parked for the budget, then 503 with the reason
        print(f"\n  router answered {response.status_code} after {time.monotonic() - parked:.2f} s")
        assert response.status_code == 503, response.text
        assert response.text.startswith(f"actor {ATESPACE}/{counter} is UNREACHABLE: node {NODE} stopped answering")
        assert "(then the actor is CRASHED)" in response.text
        resumed = act(stack, counter, "resume")
        assert (resumed.status_code, resumed.json()["reason"]) == (503, "Unreachable"), resumed.text
        suspended = act(stack, counter, "suspend")  # needs the node: refused, saying the ways out
        assert suspended.status_code == 409 and "wait for it to return" in suspended.json()["message"], suspended.text

        time.sleep(max(0.0, 16.0 - (time.monotonic() - stopped)))  # the 16 s stall
    finally:
        signal_atelet(stack, signal.SIGCONT)
    back = time.monotonic()
    print(f"\n  SIGCONT after {back - stopped:.2f} s of SIGSTOP")
    row, _ = until("actor RUNNING again", lambda: in_state(stack, counter, "RUNNING"), 30, back)
    until("workers ACTIVE again", lambda: worker_states(stack) == {"ACTIVE"} or None, 30, back)
    assert row["worker"] == home and row["last_error"] is None  # the same sandbox
    assert counted(stack, counter) == 4  # memory intact: 3 before the stall, +1
    assert [(o["operation"], o["outcome"]) for o in operations(stack, counter)][-1] == ("NodeLost", "returned")


def test_a_killed_atelet_restarted_within_the_grace_gives_the_actor_back(stack: Stack, counter: str) -> None:
    home = actor(stack, counter)["worker"]
    before = counted(stack, counter)
    killed = time.monotonic()
    signal_atelet(stack, signal.SIGKILL)
    stack.parts[DEFAULT_ATELET.part].process.wait(10)  # type: ignore[union-attr]
    unavailable, _ = lost(stack, counter, killed)
    assert unavailable <= LEASE_BOUND_SECONDS

    restarted = time.monotonic()
    stack.parts[DEFAULT_ATELET.part].start()  # adopts the sandboxes the killed atelet left
    row, _ = until(
        "actor RUNNING after the atelet restart",
        lambda: in_state(stack, counter, "RUNNING"),
        60,
        restarted,
    )
    assert row["worker"] == home
    assert counted(stack, counter) == before + 1  # the same process: memory intact
    until("workers ACTIVE again", lambda: worker_states(stack) == {"ACTIVE"} or None, 30, restarted)


def test_an_api_server_or_worker_restart_leaves_no_window_without_a_candidate(stack: Stack, counter: str) -> None:
    nodes_lost = len(stack.sql("SELECT 1 FROM operations WHERE operation = 'NodeLost'"))
    act_ok(stack, counter, "suspend", "SUSPENDED")  # frees its worker; resumed below right after each restart

    api = stack.parts["api-server"]
    api.sigkill()
    time.sleep(6.0)  # longer than the lease: every heartbeat in the database is stale now
    api.start()
    api.wait_ready()
    ready = api_ready = time.monotonic()
    response = act(stack, counter, "resume")  # within 1 s of the restart
    print(f"\n  resume right after the api-server restart: {response.status_code} in {time.monotonic() - ready:.2f} s")
    assert response.status_code == 200 and response.json()["state"] == "RUNNING", response.text
    act_ok(stack, counter, "suspend", "SUSPENDED")

    worker = stack.parts["worker"]
    worker.sigkill()
    worker.start()
    worker.wait_ready()
    ready = time.monotonic()
    response = act(stack, counter, "resume")
    print(f"\n  resume right after the worker restart: {response.status_code} in {time.monotonic() - ready:.2f} s")
    assert response.status_code == 200 and response.json()["state"] == "RUNNING", response.text

    # past a whole lease (and a check) of the restarted api-server's listening: 6 s since it was
    # ready, of which the worker's restart and the resumes above took a part
    time.sleep(max(0.0, 6.0 - (time.monotonic() - api_ready)))
    assert metric(stack, "ate_nodes_lost_total") == 0  # the restarted api-server never took the node for lost
    assert stack.sql("SELECT name FROM nodes WHERE lost_at IS NOT NULL") == []
    assert len(stack.sql("SELECT 1 FROM operations WHERE operation = 'NodeLost'")) == nodes_lost
    assert worker_states(stack) == {"ACTIVE"}
    act_ok(stack, counter, "suspend", "SUSPENDED")  # the next test needs both workers


def metric(stack: Stack, name: str) -> float:
    for line in httpx.get(f"{stack.api}/metrics", timeout=10).text.splitlines():
        if line.startswith(name):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_stall_past_the_grace_crashes_recovers_and_never_runs_twice(stack: Stack) -> None:
    make_template(stack, "healing", onCrash="Revert")
    create(stack, "healing", "h1")
    act_ok(stack, "h1", "resume", "RUNNING")
    assert [counted(stack, "h1") for _ in range(2)] == [1, 2]
    act_ok(stack, "h1", "suspend", "SUSPENDED")  # its last COMPLETED snapshot: memory_count 2
    act_ok(stack, "h1", "resume", "RUNNING")
    assert [counted(stack, "h1") for _ in range(2)] == [3, 4]  # lost with the node
    home = actor(stack, "h1")["worker"]
    recoveries = metric(stack, 'ate_actor_recoveries_total{action="Revert"}')

    stopped = time.monotonic()
    signal_atelet(stack, signal.SIGSTOP)
    try:
        unavailable, unreachable = lost(stack, "h1", stopped)
        assert unavailable <= LEASE_BOUND_SECONDS
        _, crashed = until(
            "actor CRASHED (grace passed)",
            lambda: actor(stack, "h1")["state"] in ("CRASHED", "REVERTING", "SUSPENDED") or None,
            GRACE_SECONDS + 30,
            stopped,
        )
        row, recovered = until(
            "actor reverted by onCrash: Revert",
            lambda: in_state(stack, "h1", "SUSPENDED"),
            60,
            stopped,
        )
        assert row["worker"] is None
        history = [(o["operation"], o["outcome"]) for o in operations(stack, "h1")]
        assert history[-2:] == [("NodeLost", "crashed"), ("RevertActor", "ok")], history
        revert = operations(stack, "h1")[-1]
        assert revert["error"].startswith(
            f"automatic recovery (onCrash: Revert) from the crash: node {NODE} did not answer"
        )
        assert revert["error"].endswith("what the actor did since its last completed snapshot is lost")
        assert metric(stack, 'ate_actor_recoveries_total{action="Revert"}') == recoveries + 1
        print(f"\n  UNREACHABLE at {unreachable:.2f} s, CRASHED by {crashed:.2f} s, SUSPENDED by {recovered:.2f} s")
    finally:
        signal_atelet(stack, signal.SIGCONT)
    back = time.monotonic()
    # the returning node still runs the old sandbox of h1: it is terminated, never adopted
    until(
        "old sandbox terminated",
        lambda: f"{ATESPACE}/h1" not in {a for a, _ in sandboxes(stack).values()} or None,
        60,
        back,
    )
    assert actor(stack, "h1")["state"] == "SUSPENDED"

    until("workers ACTIVE again", lambda: worker_states(stack) == {"ACTIVE"} or None, 30, back)
    assert counted(stack, "h1") == 3  # resumed at its next request from the snapshot (2), +1
    running = [w for w, (a, state) in sandboxes(stack).items() if a == f"{ATESPACE}/h1"]
    assert len(running) == 1, sandboxes(stack)  # one sandbox: the actor never runs twice
    print(f"\n  h1 ran on {home} before the loss, on {running[0]} after")
