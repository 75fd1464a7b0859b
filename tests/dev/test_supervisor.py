"""Generic child supervision: readiness by log line, failure with log tail, forced stop."""

import sys
import time
from pathlib import Path

import pytest

from ate.dev.supervisor import Child, ChildFailed, Interrupted, Supervisor, log_line


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
