"""``python -m atelet`` as a process: SIGTERM leaves nothing behind; after a crash, sandboxes that
no assignment record names are cleaned (recorded ones are adopted: test_adoption.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from atelet.proto import atelet_pb2 as pb
from atelet.proto import atelet_pb2_grpc as pb_grpc
from tests.atelet.conftest import (
    REPO,
    assert_nothing_left,
    control_plane_tls,
    counter_spec,
    force_cleanup,
    make_settings,
    runsc_missing,
    tls_flags,
)

pytestmark = [pytest.mark.runsc]


def start(settings_args: list[str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", "atelet", *settings_args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("atelet: ready on"):
            assert "(2 workers)" in line
            return proc
    raise AssertionError(f"atelet exited {proc.wait()} before it was ready")


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    try:
        yield started
    finally:
        for p in started:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()


async def run_counter(listen: str, node: str, image: str, op: str) -> str:
    async with control_plane_tls().channel(listen, node) as channel:
        stub = pb_grpc.AteletStub(channel)
        run = await stub.Run(pb.RunRequest(operation_id=op, worker="default-0",
                                           actor=pb.ActorRef(atespace="demo", name="p1"),
                                           spec=counter_spec(image), probe_timeout_seconds=20))
    async with httpx.AsyncClient(timeout=5) as client:
        assert (await client.get(f"http://{run.worker_ip}:8080/")).json()["memory_count"] == 1
    return run.worker_ip


def test_sigterm_and_crash_recovery(short_tmp: Path, counter_image: str, procs: list) -> None:
    reason = runsc_missing()
    if reason:
        pytest.skip(reason)
    settings = make_settings(short_tmp)
    args = ["--node", settings.node, "--listen", settings.listen, "--state-dir", str(settings.state_dir),
            "--snapshot-root", str(settings.snapshot_roots[0]), "--image-root", str(REPO),
            "--workers", "2", "--subnet", settings.subnet, "--metrics-listen", "", *tls_flags(settings.node)]
    try:
        # 1. crash with a sandbox running: the sandbox survives the atelet...
        first = start(args)
        procs.append(first)
        asyncio.run(run_counter(settings.listen, settings.node, counter_image, "p-op-1"))
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        # ...its record is lost (as with an atelet from before records existed)...
        (Path(settings.state_dir).resolve() / "workers/default-0/assignment.json").unlink()
        # ...so the next atelet on the same state dir removes it and rebuilds its namespaces.
        second = start(args)
        procs.append(second)
        root = Path(settings.state_dir).resolve() / "runsc"
        listed = subprocess.run(["runsc", f"--root={root}", "list", "-quiet"], capture_output=True, text=True)
        assert listed.stdout.strip() == ""
        asyncio.run(run_counter(settings.listen, settings.node, counter_image, "p-op-2"))
        # 2. SIGTERM: stops cleanly, nothing left.
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0
        assert_nothing_left(settings)
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
                p.wait(30)
        force_cleanup(settings)
