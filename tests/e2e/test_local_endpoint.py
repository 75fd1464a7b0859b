"""The actor's own hand (issue 27): from inside its sandbox an actor calls ate's local endpoint,
`http://169.254.100.1`, answered by its node's atelet, with no token. The counter example relays
`/local/<path>` to it (`examples/counter/main.go`), so each call here is made by the sandbox
itself: it learns who it is, suspends itself after a linger, sets its own idle policy, and asks
for wakes that reach it after its suspend and after the Temporal worker process was killed.
A call naming another actor, or made to another worker's gateway, is refused."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import PORTS, Stack
from tests.e2e.test_idle import actor, wait_state
from tests.e2e.test_lifecycle import api, setup_actor
from tests.e2e.test_tour import get

pytestmark = [pytest.mark.slow, pytest.mark.runsc]

LOCAL_ENDPOINT_PORT = 8086
"""The atelet's default `local_endpoint_port` (where 169.254.100.1:80 is redirected to)."""


def local(
    stack: Stack, who: str, method: str, path: str, body: Any = None, **query: str
) -> tuple[int, Any]:
    """The sandbox of `who` calls `method path` on its local endpoint; (status, JSON body)."""
    response = httpx.request(
        method, f"{stack.router}/local{path}", headers={"ate-target-actor": who}, params=query,
        content=None if body is None else json.dumps(body), timeout=30,
    )  # fmt: skip
    assert response.status_code == 200, response.text
    relayed = response.json()
    text = relayed["body"]
    return relayed["status"], (json.loads(text) if text else None)


def test_an_actor_learns_who_it_is_and_suspends_itself_after_a_linger(stack: Stack) -> None:
    path = setup_actor(stack, "own", "s1")
    assert get(stack, "own/s1")["memory_count"] == 1
    status, me = local(stack, "own/s1", "GET", "/v1/self")
    assert status == 200 and (me["atespace"], me["name"], me["state"]) == ("own", "s1", "RUNNING")
    asked = time.monotonic()
    status, accepted = local(stack, "own/s1", "POST", "/v1/self/suspend", {"linger_seconds": 3})
    assert status == 202 and accepted["operation"] == "SuspendActor", accepted
    time.sleep(1)
    assert actor(stack, path)["state"] == "RUNNING"  # still lingering: it answers
    assert get(stack, "own/s1")["memory_count"] == 2
    done = wait_state(stack, path, "SUSPENDED", 30)
    assert time.monotonic() - asked >= 3
    history = api(stack, "GET", path + "/operations").json()["items"]
    suspend = next(h for h in history if h["operation"] == "SuspendActor")
    assert suspend["reason"] == "asked by the actor (linger 3 s)", suspend
    assert done["worker"] is None
    assert get(stack, "own/s1")["memory_count"] == 3  # resumed with its memory
    stack.ate("suspend", "actor", "s1", "-a", "own")


def test_an_actor_sets_and_clears_its_own_idle_policy_and_bad_ones_are_refused(stack: Stack) -> None:
    path = setup_actor(stack, "own", "p1")
    get(stack, "own/p1")
    status, me = local(stack, "own/p1", "PUT", "/v1/self/idle", {"afterSeconds": 2, "action": "Suspend"})
    assert status == 200 and me["idle"]["source"] == "actor", me
    assert actor(stack, path)["idle"]["policy"] == [{"afterSeconds": 2, "action": "Suspend"}]
    for bad, field in (({"afterSeconds": -1, "action": "Suspend"}, "idle"), ({"afterSeconds": 5, "action": "Nap"}, "idle")):
        status, refused = local(stack, "own/p1", "PUT", "/v1/self/idle", bad)
        assert status == 400 and field in refused["message"], refused
    assert actor(stack, path)["idle"]["policy"] == [{"afterSeconds": 2, "action": "Suspend"}]  # unchanged
    wait_state(stack, path, "SUSPENDED", 30)  # its own policy took it down
    get(stack, "own/p1")
    status, me = local(stack, "own/p1", "DELETE", "/v1/self/idle")
    assert status == 200 and me["idle"] is None and actor(stack, path)["idle"] is None, me  # the template has none
    stack.ate("suspend", "actor", "p1", "-a", "own")


def test_a_wake_the_actor_asked_for_reaches_it_after_its_suspend_and_a_worker_restart(stack: Stack) -> None:
    path = setup_actor(stack, "own", "w1")
    assert get(stack, "own/w1")["memory_count"] == 1
    status, wake = local(stack, "own/w1", "POST", "/v1/self/wakes", {"name": "tick", "after_seconds": 12, "path": "/"})
    assert status == 201 and wake["name"] == "tick", wake
    status, listed = local(stack, "own/w1", "GET", "/v1/self/wakes")
    deadline = time.monotonic() + 5
    while status == 200 and not listed["items"] and time.monotonic() < deadline:  # visibility lags a little
        time.sleep(0.3)
        status, listed = local(stack, "own/w1", "GET", "/v1/self/wakes")
    assert [(w["name"], w["path"]) for w in listed["items"]] == [("tick", "/")]
    status, refused = local(stack, "own/w1", "POST", "/v1/self/wakes", {"name": "tick", "after_seconds": 5})
    assert status == 409 and "already has a pending wake named tick" in refused["message"]
    status, refused = local(stack, "own/w1", "POST", "/v1/self/wakes", {"after_seconds": -3})
    assert status == 400 and refused["details"]["field"] == "after_seconds", refused
    stack.ate("suspend", "actor", "w1", "-a", "own")  # the wake is Temporal's: it outlives this
    kill_temporal_worker()  # `ate dev` starts it again
    deadline = time.monotonic() + 60
    while actor(stack, path)["state"] != "RUNNING":
        assert time.monotonic() < deadline, "the wake did not resume the actor within 60 s"
        time.sleep(0.5)
    wait_state(stack, path, "RUNNING", 30)
    assert get(stack, "own/w1")["memory_count"] == 3  # the wake's request was the second
    stack.ate("suspend", "actor", "w1", "-a", "own")


def test_calls_for_another_actor_or_to_another_workers_gateway_are_refused(stack: Stack) -> None:
    path_a, path_b = setup_actor(stack, "own", "a1"), setup_actor(stack, "own", "b1")
    try:
        get(stack, "own/a1")
        get(stack, "own/b1")
        worker_a, worker_b = actor(stack, path_a)["worker"], actor(stack, path_b)["worker"]
        assert worker_a["name"] != worker_b["name"]
        status, refused = local(stack, "own/a1", "POST", "/v1/self/suspend", {}, target="own/b1")
        assert status == 403 and "acts only for the actor calling it (own/a1)" in (refused or {}).get("message", ""), (status, refused)
        status, me = local(stack, "own/a1", "GET", "/v1/self", target="own/a1")  # naming itself is fine
        assert status == 200 and me["name"] == "a1"
        gateway_a, gateway_b = (str(ipaddress.IPv4Address(w["ip"]) - 1) for w in (worker_a, worker_b))
        status, me = local(stack, "own/a1", "GET", "/v1/self", via=f"{gateway_a}:{LOCAL_ENDPOINT_PORT}")
        assert status == 200 and me["name"] == "a1"  # its own gateway's port answers it
        response = httpx.get(
            f"{stack.router}/local/v1/self", timeout=30,
            headers={"ate-target-actor": "own/a1"}, params={"via": f"{gateway_b}:{LOCAL_ENDPOINT_PORT}"},
        )  # fmt: skip
        assert response.status_code == 502 and "error" in response.json(), response.text  # dropped: no connection
        for path in (path_a, path_b):
            assert (actor(stack, path)["state"], actor(stack, path)["operation"]) == ("RUNNING", None)  # untouched
    finally:  # whatever failed above, the two workers are free for the tests after this one
        for name in ("a1", "b1"):
            stack.ate("suspend", "actor", name, "-a", "own", check=False)


def kill_temporal_worker() -> None:
    """SIGKILL the e2e stack's Temporal worker process (`ate worker ... --router-url <its router>`)."""
    router = f"127.0.0.1:{PORTS['router']}"
    killed = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"worker" in argv and b"--router-url" in argv and any(router.encode() in a for a in argv):
            os.kill(int(proc.name), signal.SIGKILL)
            killed += 1
    assert killed == 1, f"found {killed} Temporal worker processes of the e2e stack"
