"""Generic child supervision: readiness by log line, failure with log tail, forced stop."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ate.dev.child import Child, ChildFailed, Interrupted, log_line
from ate.dev.restart import CrashCounter, RestartPolicy
from ate.dev.supervisor import Supervisor

PROJECT = Path(__file__).resolve().parents[2]


def py(code: str) -> list[str]:
    return [sys.executable, "-u", "-c", code]


def test_ready_line_and_graceful_stop(tmp_path: Path) -> None:
    child = Child(
        "part",
        py("import time; print('warming up'); time.sleep(0.3); print('part: ready'); time.sleep(60)"),
        tmp_path / "part.log",
        ready=log_line("part: ready"),
    )
    sup = Supervisor(lambda: False, ready_timeout=10)
    sup.start(child)
    assert child.running()
    lines: list[str] = []
    sup.stop_all(lines.append)
    assert not child.running()
    assert lines == ["part: stopped"]
    assert "part: ready" in (tmp_path / "part.log").read_text()


def test_exit_before_ready_reports_the_log_tail(tmp_path: Path) -> None:
    code = "import sys\nfor i in range(40): print(f'line {i}')\nsys.exit(3)"
    child = Child("bad", py(code), tmp_path / "bad.log", ready=log_line("bad: ready"))
    with pytest.raises(ChildFailed) as caught:
        Supervisor(lambda: False, ready_timeout=10).start(child)
    assert caught.value.reason == "exited with code 3 before it was ready"
    assert caught.value.tail == [f"line {i}" for i in range(10, 40)]


def test_not_ready_in_time(tmp_path: Path) -> None:
    child = Child("slow", py("import time; time.sleep(60)"), tmp_path / "slow.log", ready=log_line("never"))
    sup = Supervisor(lambda: False, ready_timeout=0.5)
    with pytest.raises(ChildFailed, match="not ready within"):
        sup.start(child)
    sup.stop_all()
    assert not child.running()


def test_stop_request_interrupts_the_wait(tmp_path: Path) -> None:
    child = Child("slow", py("import time; time.sleep(60)"), tmp_path / "slow.log", ready=log_line("never"))
    sup = Supervisor(lambda: True, ready_timeout=30)
    with pytest.raises(Interrupted):
        sup.start(child)
    sup.stop_all()


def test_sigterm_ignored_means_sigkill_after_timeout(tmp_path: Path) -> None:
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('stubborn: ready'); time.sleep(60)"
    )
    child = Child("stubborn", py(code), tmp_path / "s.log", ready=log_line("stubborn: ready"))
    sup = Supervisor(lambda: False, ready_timeout=10, stop_timeout=0.5)
    sup.start(child)
    started = time.monotonic()
    sup.stop_all()
    assert time.monotonic() - started < 5
    assert child.returncode() == -9


def test_crash_counter_backs_off_and_gives_up() -> None:
    counter = CrashCounter(RestartPolicy())
    # Crashes in quick succession: 1 s, 2 s, 4 s, 8 s, and the fifth within 60 s gives up.
    assert [counter.crashed(t, 0.5) for t in (0.0, 2.0, 5.0, 10.0)] == [1.0, 2.0, 4.0, 8.0]
    assert counter.crashed(19.0, 0.5) is None


def test_crash_counter_caps_the_delay_and_resets_after_a_long_run() -> None:
    counter = CrashCounter(RestartPolicy())
    # One crash every 20 s never makes 5 within 60 s, but the delay keeps doubling up to 30 s.
    delays = [counter.crashed(20.0 * i, 15.0) for i in range(8)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    # A part that ran for a minute or more starts again at 1 s.
    assert counter.crashed(500.0, 60.0) == 1.0


def test_a_crash_after_ready_restarts_with_backoff(tmp_path: Path) -> None:
    code = "import time; print('part: ready', flush=True); time.sleep(60)"
    child = Child("part", py(code), tmp_path / "part.log", ready=log_line("part: ready"), ready_message="part: up")
    sup = Supervisor(lambda: False, ready_timeout=10, policy=RestartPolicy(first_delay=0.2, max_delay=0.4))
    sup.start(child)
    lines: list[str] = []
    try:
        first = child.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        child.process.wait()  # type: ignore[union-attr]
        started = time.monotonic()
        sup.tend(lines.append)
        assert lines == ["part: exited (-9), restarting"]
        assert not sup.is_up(child)
        while lines[-1] != "part: up" and time.monotonic() - started < 10:
            sup.tend(lines.append)
            time.sleep(0.05)
        assert lines == ["part: exited (-9), restarting", "part: up"]
        assert time.monotonic() - started >= 0.2  # waited the first delay
        assert child.running() and child.pid != first and sup.is_up(child)
        # The log keeps both runs; readiness was judged on the new run's lines only.
        assert (tmp_path / "part.log").read_text().splitlines().count("part: ready") == 2
    finally:
        sup.stop_all()


def test_a_part_that_keeps_crashing_gives_up(tmp_path: Path) -> None:
    code = "import time; print('flaky: ready', flush=True); time.sleep(0.5); print('flaky: oops'); raise SystemExit(4)"
    child = Child("flaky", py(code), tmp_path / "flaky.log", ready=log_line("flaky: ready"))
    sup = Supervisor(lambda: False, ready_timeout=10, policy=RestartPolicy(first_delay=0.01, max_delay=0.01))
    sup.start(child)
    lines: list[str] = []
    deadline = time.monotonic() + 30
    with pytest.raises(ChildFailed) as caught:
        while time.monotonic() < deadline:
            sup.tend(lines.append)
            time.sleep(0.02)
    assert caught.value.reason == "exited (4) 5 times within 60 s, giving up"
    assert caught.value.tail[-1] == "flaky: oops"
    assert lines.count("flaky: exited (4), restarting") == 4
    assert lines.count("flaky: ready") == 4
    sup.stop_all()


def test_a_restart_that_never_gets_ready_counts_as_a_crash(tmp_path: Path) -> None:
    marker = tmp_path / "started-once"
    code = (
        "import os, sys, time\n"
        f"m = {str(marker)!r}\n"
        "if not os.path.exists(m):\n"
        "    open(m, 'w').close(); print('slow: ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    child = Child("slow", py(code), tmp_path / "slow.log", ready=log_line("slow: ready"))
    sup = Supervisor(lambda: False, ready_timeout=0.5, stop_timeout=1, policy=RestartPolicy(first_delay=0.01))
    sup.start(child)
    child.kill()
    child.process.wait()  # type: ignore[union-attr]
    lines: list[str] = []
    deadline = time.monotonic() + 10
    while len(lines) < 3 and time.monotonic() < deadline:
        sup.tend(lines.append)
        time.sleep(0.05)
    assert lines[:3] == [
        "slow: exited (-9), restarting",
        "slow: not ready within 0.5 s",
        "slow: exited (-15), restarting",
    ]
    sup.stop_all()


def test_children_get_sigterm_when_the_supervisor_is_killed(tmp_path: Path) -> None:
    record = tmp_path / "terms"
    part = (
        "import signal, sys, time\n"
        "def term(*_):\n"
        f"    open({str(record)!r}, 'a').write(sys.argv[1] + '\\n'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, term)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    (tmp_path / "part.py").write_text(part)
    boss = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from ate.dev.child import Child, log_line\n"
        "from ate.dev.supervisor import Supervisor\n"
        "sup = Supervisor(lambda: False, ready_timeout=10)\n"
        "for name in ('a', 'b'):\n"
        f"    sup.start(Child(name, [sys.executable, {str(tmp_path / 'part.py')!r}, name],"
        f" Path({str(tmp_path)!r}) / (name + '.log'), ready=log_line('ready')))\n"
        "print(' '.join(str(c.pid) for c in sup.children), flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", boss], stdout=subprocess.PIPE, text=True, cwd=PROJECT)
    assert proc.stdout is not None
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(
        psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids
    ):
        time.sleep(0.1)
    assert sorted(record.read_text().split()) == ["a", "b"]
