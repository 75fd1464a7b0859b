"""`ate logs` on the real stack (runsc, the atelet's collector, Temporal, Postgres): the counter's
lines come back in order with its lifecycle between them, `-f` follows them across a suspend and
the resume after it, `--tail` and `--timestamps` do what they say, and a log request for an actor
that never ran says so and changes nothing.

Expected values: the counter logs `counter: listening on 0.0.0.0:8080, data dir /data` at start
and `counted: memory_count N, file_count N` after each counted request (examples/counter/main.go,
with Go's date and time before each); the template's golden snapshot holds the started counter; its memory survives a FULL suspend, so the request after the
resume is number 3. The node's JSON lines name the template and the generation restored (0: the
golden snapshot; the first suspend writes generation 1)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from datetime import datetime

import pytest

from tests.e2e.conftest import ATE, REPO, Stack
from tests.e2e.test_lifecycle import api, setup_actor
from tests.e2e.test_tour import get

pytestmark = [pytest.mark.slow, pytest.mark.runsc]


START = "counter: listening on 0.0.0.0:8080, data dir /data"


def counted(n: int) -> str:
    return f"counted: memory_count {n}, file_count {n}"


def wait_for(stack: Stack, args: list[str], ending: str, timeout: float = 30) -> list[str]:
    """`ate logs ...` until its last line ends with `ending` (the collector ships every 0.25 s)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = stack.ate("logs", *args).stdout.splitlines()
        if (lines and lines[-1].endswith(ending)) or time.monotonic() > deadline:
            return lines
        time.sleep(0.5)


def test_logs_show_the_counter_across_a_suspend(stack: Stack) -> None:
    try:
        logs_across_a_suspend(stack)
    finally:  # the stack has two workers: give the place back, whatever happened
        stack.ate("suspend", "actor", "l1", "-a", "lgs", check=False)


def logs_across_a_suspend(stack: Stack) -> None:
    path = setup_actor(stack, "lgs", "l1")
    before = api(stack, "GET", path).json()
    never = stack.ate("logs", "actor", "l1", "-a", "lgs", check=False)
    assert never.returncode != 0 and "has never run, so it has no output yet" in never.stderr, never
    assert api(stack, "GET", path).json() == before

    # -f from the start: it waits for the first line, then follows across the suspend
    follower = subprocess.Popen([ATE, "--server", stack.api, "logs", "actor", "l1", "-a", "lgs", "-f"], cwd=REPO,
                                stdout=subprocess.PIPE, text=True, env={**os.environ, "ATE_CONFIG": str(stack.config)})  # fmt: skip
    followed: list[str] = []

    def read() -> None:
        assert follower.stdout is not None
        for line in follower.stdout:
            followed.append(line.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert [get(stack, "lgs/l1")["memory_count"] for _ in range(2)] == [1, 2]
        wait_for(stack, ["actor", "l1", "-a", "lgs"], counted(2))
        stack.ate("suspend", "actor", "l1", "-a", "lgs")
        assert get(stack, "lgs/l1")["memory_count"] == 3
        lines = wait_for(stack, ["actor", "l1", "-a", "lgs"], counted(3))
        ours = [line for line in lines if "counted:" in line or "counter: listening" in line or line.startswith("[ate] ")]
        # Go's log prefixes date and time; the resume's event names its worker
        resumed = [line for line in ours if line.startswith("[ate] resumed on ")]
        assert len(resumed) == 2, ours
        shape = ["resumed" if line in resumed else "suspended" if line == "[ate] suspended" else
                 line.split(" ", 2)[2] for line in ours]  # fmt: skip
        # the start line was printed by the golden boot the actor's first sandbox was restored from:
        # the restore inherits it, before the sandbox runs
        assert shape == [START, "resumed", counted(1), counted(2), "suspended", "resumed", counted(3)], ours
        deadline = time.monotonic() + 30
        while not any(line.endswith(counted(3)) for line in followed) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [line for line in followed if "counted:" in line or "counter: listening" in line
                or line.startswith("[ate] ")] == ours, followed  # fmt: skip
    finally:
        follower.terminate()
        follower.wait(10)

    tail = stack.ate("logs", "actor", "l1", "-a", "lgs", "--tail", "1", "--timestamps").stdout.splitlines()
    assert len(tail) >= 1 and tail[-1].endswith(counted(3)), tail
    stamp = tail[-1].split(" ", 1)[0]
    assert abs(datetime.fromisoformat(stamp).timestamp() - time.time()) < 120, stamp
    bad = stack.ate("logs", "actor", "l1", "-a", "lgs", "--since", "ten minutes", check=False)
    assert bad.returncode == 2 and "is not a duration" in bad.stderr, bad

    # the node's own JSON lines, for a cluster's log collector, carry the labels: the first
    # sandbox was restored from the template's golden snapshot (generation 0), the one after the
    # suspend from the actor's generation 1
    records = [json.loads(line) for line in (stack.data_dir / "logs" / "atelet.log").read_text().splitlines()
               if line.startswith("{") and '"actor": "l1"' in line]  # fmt: skip
    labels = {r["line"].split(" ", 2)[-1]: (r["atespace"], r["template"], r["container"], r["generation"])
              for r in records if "counted:" in r["line"]}  # fmt: skip
    assert labels == {counted(1): ("lgs", "counter", "counter", 0), counted(2): ("lgs", "counter", "counter", 0),
                      counted(3): ("lgs", "counter", "counter", 1)}, records  # fmt: skip
