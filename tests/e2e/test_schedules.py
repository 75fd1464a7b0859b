"""Schedules on the real stack (issue 27): a Temporal Schedule wakes a suspended actor at set
times with a request through the router, the actor's idle policy suspends it again between wakes,
and every request reaches it: its counter counts each wake (FULL snapshots keep its memory)."""

from __future__ import annotations

import json
import time

import pytest

from tests.e2e.conftest import Stack
from tests.e2e.test_idle import actor, wait_state
from tests.e2e.test_lifecycle import api, setup_actor
from tests.e2e.test_tour import get

pytestmark = [pytest.mark.slow, pytest.mark.runsc]


def schedules(stack: Stack) -> list[dict[str, object]]:
    listed: list[dict[str, object]] = json.loads(
        stack.ate("get", "schedules", "-a", "sch", "--actor", "s1", "-o", "json").stdout
    )["items"]
    return listed


def test_a_schedule_wakes_a_suspended_actor_and_each_wake_reaches_it(stack: Stack) -> None:
    path = setup_actor(stack, "sch", "s1")
    assert api(stack, "PATCH", path, json={"idle": {"afterSeconds": 1, "action": "Suspend"}}).status_code == 200
    made = stack.ate("create", "schedule", "tick", "-a", "sch", "--actor", "s1", "--every", "4", "--path", "/")
    assert made.stdout.startswith("schedule/tick created: next wake ")
    deadline = time.monotonic() + 60
    while int(schedules(stack)[0]["recent_wakes"]) < 3:  # type: ignore[call-overload]
        assert time.monotonic() < deadline, f"fewer than 3 wakes in 60 s: {schedules(stack)}"
        time.sleep(0.5)
    stack.ate("delete", "schedule", "tick", "-a", "sch", "--actor", "s1")
    assert schedules(stack) == []
    time.sleep(2)  # a wake started just before the delete runs to its end
    wait_state(stack, path, "SUSPENDED", 20)
    ops = api(stack, "GET", path + "/operations", params={"limit": 100}).json()["items"]
    resumes = [h for h in ops if h["operation"] == "ResumeActor"]
    idle_suspends = [h for h in ops if h["operation"] == "SuspendActor" and (h["reason"] or "").startswith("idle")]
    wakes = len(resumes)  # each wake found the actor suspended and resumed it
    assert wakes >= 3 and len(idle_suspends) >= wakes - 1, ops
    counted = get(stack, "sch/s1")  # one more request: every wake before it was counted
    assert (counted["memory_count"], counted["file_count"]) == (wakes + 1, wakes + 1)
    api(stack, "PATCH", path, json={"idle": []})
    stack.ate("suspend", "actor", "s1", "-a", "sch")
    assert actor(stack, path)["state"] == "SUSPENDED"
