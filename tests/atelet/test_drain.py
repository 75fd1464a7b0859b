"""``--drain-on-sigterm``: SIGTERM asks the API to drain, waits for the checkpoints, then stops."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from atelet.proto import atelet_pb2 as pb
from atelet.proto import atelet_pb2_grpc as pb_grpc
from atelet.settings import AteletSettings
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
from tests.atelet.fake_api import FakeApi, fake_api

ACTOR = pb.ActorRef(atespace="demo", name="d1")


@pytest.mark.parametrize("drain", [True, False])
def test_idle_node_stops_promptly_with_or_without_drain(tmp_path: Path, drain: bool) -> None:
    settings = make_settings(tmp_path)
    with fake_api() as api:
        proc = start(settings, api, tmp_path / "atelet.log", "--hollow", drain=drain)
        try:
            assert api.wait_for(lambda: bool(api.of("PUT", "")), 10)
            began = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0
            took = time.monotonic() - began
        finally:
            stop(proc)
        assert len(api.of("POST", "/drain")) == (1 if drain else 0)
        assert took < 6


@pytest.fixture
def settings(short_tmp: Path) -> Iterator[AteletSettings]:
    reason = runsc_missing()
    if reason:
        pytest.skip(reason)
    settings = make_settings(short_tmp)
    try:
        yield settings
    finally:
        force_cleanup(settings)


def start(settings: AteletSettings, api: FakeApi, log: Path, *extra: str,
          drain: bool = True) -> subprocess.Popen[bytes]:
    args = [*extra, "--node", settings.node, "--listen", settings.listen, "--state-dir", str(settings.state_dir),
            "--snapshot-root", str(settings.snapshot_roots[0]), "--image-root", str(REPO), "--workers", "2",
            "--subnet", settings.subnet, "--metrics-listen", "", "--api-server", api.url,
            "--heartbeat-seconds", "0.5", *(["--drain-on-sigterm"] if drain else []),
            "--drain-deadline-seconds", "120", *tls_flags(settings.node)]
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "atelet", *args], cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while b"atelet: ready on" not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"atelet did not start: {log.read_text()}")
        time.sleep(0.05)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def run_counter(settings: AteletSettings, image: str) -> None:
    async def go() -> None:
        async with control_plane_tls().channel(settings.listen, settings.node) as channel:
            await pb_grpc.AteletStub(channel).Run(pb.RunRequest(
                operation_id="drain-run", worker="default-0", actor=ACTOR, spec=counter_spec(image),
                probe_timeout_seconds=20))
    asyncio.run(go())


@pytest.mark.runsc
def test_sigterm_drains_then_exits_once_suspended(settings: AteletSettings, counter_image: str) -> None:
    with fake_api() as api:
        checkpointed: list[float] = []

        def suspend() -> None:  # what the EvictionDeadline -> SuspendActor workflows do
            time.sleep(0.5)
            with control_plane_tls().sync_channel(settings.listen, settings.node) as channel:
                pb_grpc.AteletStub(channel).Checkpoint(pb.CheckpointRequest(
                    operation_id="drain-ckpt", worker="default-0", actor=ACTOR, scope=pb.SNAPSHOT_SCOPE_FULL,
                    snapshot_uri=f"file://{Path(settings.snapshot_roots[0]).resolve()}/demo/d1/1"))
            checkpointed.append(time.monotonic())

        api.on_drain = suspend
        proc = start(settings, api, Path(settings.state_dir).parent / "atelet.log")
        try:
            run_counter(settings, counter_image)
            proc.send_signal(signal.SIGTERM)
            assert api.wait_for(lambda: bool(api.of("POST", "/drain")), 10)
            drain = api.of("POST", "/drain")[0]
            assert drain.path == f"/v1/nodes/{settings.node}/drain"
            assert drain.body == {"deadline_seconds": 120}
            assert proc.wait(30) == 0
            exited = time.monotonic()
        finally:
            stop(proc)
        assert checkpointed, "the Checkpoint during the drain failed"
        assert exited >= checkpointed[0]
        assert (Path(settings.snapshot_roots[0]).resolve() / "demo/d1/1/manifest.json").exists()
        assert api.events() == []
        assert_nothing_left(settings)


@pytest.mark.runsc
def test_second_sigterm_stops_at_once(settings: AteletSettings, counter_image: str) -> None:
    with fake_api() as api:  # this API never suspends anything
        proc = start(settings, api, Path(settings.state_dir).parent / "atelet.log")
        try:
            run_counter(settings, counter_image)
            proc.send_signal(signal.SIGTERM)
            assert api.wait_for(lambda: bool(api.of("POST", "/drain")), 10)
            time.sleep(1.5)
            assert proc.poll() is None  # still draining: the sandbox runs
            with control_plane_tls().sync_channel(settings.listen, settings.node) as channel:  # and gRPC still serves
                health = pb_grpc.AteletStub(channel).Health(pb.HealthRequest(), timeout=5)
            assert [w.sandbox_state for w in health.workers] == ["running", "idle"]
            second = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0
            assert time.monotonic() - second < 10
        finally:
            stop(proc)
        assert api.events() == []
        assert_nothing_left(settings)
