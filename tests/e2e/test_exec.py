"""`ate exec` on the real stack (runsc, Temporal, Postgres): a command runs in a RUNNING counter's
sandbox and the CLI prints its output and exits with its status, the exec is in the actor's
history with who ran what, a suspend ends a running exec, and an exec into a SUSPENDED actor or
by a viewer is refused and changes nothing.

Expected values: the counter writes the number of requests it served into /data/count.txt
(examples/counter/main.go); busybox's `sh -c 'exit 7'` exits 7; the history names whoever
`/v1/whoami` says the CLI's token is."""

from __future__ import annotations

import threading
import time

import pytest

from tests.e2e.conftest import Stack
from tests.e2e.test_lifecycle import api, setup_actor
from tests.e2e.test_tour import get

pytestmark = [pytest.mark.slow, pytest.mark.runsc]


def test_exec_runs_in_the_actor_and_is_recorded(stack: Stack) -> None:
    path = setup_actor(stack, "ex", "e1")
    before = api(stack, "GET", path).json()
    refused = stack.ate("exec", "actor", "e1", "-a", "ex", "--", "cat", "/data/count.txt", check=False)
    assert refused.returncode != 0 and "is SUSPENDED" in refused.stderr and "resume it first" in refused.stderr, refused
    assert api(stack, "GET", path).json()["state"] == before["state"] == "SUSPENDED"

    assert [get(stack, "ex/e1")["file_count"] for _ in range(2)] == [1, 2]
    shown = stack.ate("exec", "actor", "e1", "-a", "ex", "--", "cat", "/data/count.txt")
    assert shown.stdout == "2\n", shown
    failed = stack.ate("exec", "actor", "e1", "-a", "ex", "--", "sh", "-c", "echo to-err >&2; exit 7", check=False)
    assert (failed.returncode, failed.stdout, failed.stderr) == (7, "", "to-err\n"), failed

    me = api(stack, "GET", "/v1/whoami").json()["name"]
    history = api(stack, "GET", path + "/operations").json()["items"]
    execs = [op for op in history if op["operation"] == "ExecInActor"]
    assert [(op["outcome"], op["reason"]) for op in execs[:2]] == [
        ("exit 7", f"by {me}: sh -c echo to-err >&2; exit 7"), ("exit 0", f"by {me}: cat /data/count.txt")
    ], execs

    # A suspend is not kept waiting by a long exec: its checkpoint ends it, and the CLI says so.
    result: dict[str, object] = {}

    def long_exec() -> None:
        result["done"] = stack.ate("exec", "actor", "e1", "-a", "ex", "--timeout", "300", "--", "sleep", "300",
                                   check=False)  # fmt: skip

    thread = threading.Thread(target=long_exec)
    thread.start()
    time.sleep(3)
    started = time.monotonic()
    stack.ate("suspend", "actor", "e1", "-a", "ex")
    suspend_seconds = time.monotonic() - started
    thread.join(60)
    done = result["done"]
    assert done.returncode == 137 and "the actor was suspended" in done.stderr, done  # type: ignore[attr-defined]
    assert suspend_seconds < 60, suspend_seconds
    # The snapshot holds the counter without the exec: the next request resumes it with its memory.
    assert get(stack, "ex/e1")["memory_count"] == 3
    ps = stack.ate("exec", "actor", "e1", "-a", "ex", "--", "ps")
    assert "/counter" in ps.stdout and "sleep 300" not in ps.stdout, ps.stdout
    stack.ate("suspend", "actor", "e1", "-a", "ex")  # the stack has two workers: give the place back
