"""A sandbox that exits on its own is noticed, kept as ``exited`` and reported once to the API."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from atelet.proto import atelet_pb2 as pb
from tests.atelet.conftest import (
    Atelet,
    assert_nothing_left,
    counter_spec,
    force_cleanup,
    make_settings,
    running_atelet,
    runsc_missing,
)
from tests.atelet.fake_api import FakeApi, fake_api

pytestmark = [pytest.mark.runsc, pytest.mark.asyncio]


def op() -> str:
    return f"op-{uuid.uuid4().hex[:12]}"


async def until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def runsc(a: Atelet, *args: str) -> subprocess.CompletedProcess[str]:
    root = Path(a.settings.state_dir).resolve() / "runsc"
    return subprocess.run(["runsc", f"--root={root}", *args], capture_output=True, text=True, check=False)


def container_of(a: Atelet, worker: str) -> str:
    ids = [c for c in runsc(a, "list", "-quiet").stdout.split() if c.startswith(f"{worker}-")]
    assert len(ids) == 1, ids
    return ids[0]


@pytest.fixture
def api() -> Iterator[FakeApi]:
    with fake_api() as api:
        yield api


@pytest.fixture
async def atelet_api(short_tmp: Path, api: FakeApi):  # type: ignore[no-untyped-def]
    reason = runsc_missing()
    if reason:
        pytest.skip(reason)
    settings = make_settings(short_tmp, api_server=api.url, heartbeat_seconds=0.2)
    try:
        async with running_atelet(settings) as a:
            yield a
        assert_nothing_left(settings)
    finally:
        force_cleanup(settings)


async def run(a: Atelet, worker: str, name: str, image: str) -> pb.RunResponse:
    return await a.stub.Run(pb.RunRequest(operation_id=op(), worker=worker, actor=pb.ActorRef(atespace="demo", name=name),
                                          spec=counter_spec(image), probe_timeout_seconds=20))


async def states(a: Atelet) -> dict[str, tuple[str, str, str]]:
    health = await a.stub.Health(pb.HealthRequest())
    return {w.name: (w.sandbox_state, w.actor.name, w.exit_reason) for w in health.workers}


async def test_crash_is_reported_once_then_terminate_frees_the_worker(
        atelet_api: Atelet, api: FakeApi, counter_image: str) -> None:
    a = atelet_api
    await run(a, "default-0", "c1", counter_image)
    await run(a, "default-1", "c2", counter_image)
    api.fail_events = 1  # the first delivery fails: the atelet retries

    # 1. the sandbox process itself is killed from outside
    pid = json.loads(runsc(a, "state", container_of(a, "default-0")).stdout)["pid"]
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    for _ in range(200):
        if (await states(a))["default-0"][0] == "exited":
            break
        await asyncio.sleep(0.02)
    noticed = time.monotonic() - killed
    assert await until(lambda: any(e.body["worker"] == "default-0" for e in api.events()))
    detected = api.events()[0].at - killed
    assert await until(lambda: len(api.events()) == 2)  # the retry after the 503
    event = api.events()[1].body
    assert event["worker"] == "default-0"
    assert event["actor"] == {"atespace": "demo", "name": "c1"}
    assert event["event"] == "exited"
    assert "sandbox process died" in event["reason"]
    assert "counter: listening" in event["reason"]  # the last line of the actor's log

    # 2. the workload is killed inside the sandbox (what an OOM kill looks like): exit status known
    killed = time.monotonic()
    assert runsc(a, "kill", container_of(a, "default-1"), "KILL").returncode == 0
    assert await until(lambda: len(api.events()) == 3)
    detected_signal = api.events()[2].at - killed
    event = api.events()[2].body
    assert event["worker"] == "default-1" and event["actor"]["name"] == "c2"
    assert "exit status 137 (killed by signal 9, SIGKILL" in event["reason"], event["reason"]
    print(f"exit detection: sandbox process killed: exited after {noticed:.3f}s, event after {detected:.3f}s; "
          f"workload killed: event after {detected_signal:.3f}s")
    assert noticed < 1.0 and detected < 2.0 and detected_signal < 1.0

    # Health and the heartbeat show both exited actors; their durable dirs are kept.
    health = await states(a)
    assert health["default-0"][:2] == ("exited", "c1") and health["default-1"][:2] == ("exited", "c2")
    assert "sandbox process died" in health["default-0"][2]
    state_dir = Path(a.settings.state_dir).resolve()
    assert (state_dir / "actors/demo/c1/volumes/data").is_dir()
    assert await until(lambda: api.of("PUT", "")[-1].body["workers"][0]["actor"] == {"atespace": "demo", "name": "c1"}
                       and api.of("PUT", "")[-1].at > api.events()[-1].at)
    # Exited sandboxes are removed from runsc (the actor stays recorded on the worker).
    assert await until(lambda: runsc(a, "list", "-quiet").stdout.strip() == "", 5)

    # Busy until terminated; Terminate frees it (idempotent) and a Run works again.
    with pytest.raises(Exception, match="busy"):
        await run(a, "default-0", "c3", counter_image)
    term = pb.TerminateRequest(operation_id=op(), worker="default-0", actor=pb.ActorRef(atespace="demo", name="c1"))
    assert not (await a.stub.Terminate(term)).was_running
    assert not (await a.stub.Terminate(term)).was_running
    assert not (state_dir / "actors/demo/c1").exists()
    assert (await states(a))["default-0"] == ("idle", "", "")
    again = await run(a, "default-0", "c1", counter_image)
    assert again.worker_ip
    await a.stub.Terminate(pb.TerminateRequest(operation_id=op(), worker="default-1",
                                               actor=pb.ActorRef(atespace="demo", name="c2")))
    await asyncio.sleep(0.5)
    assert len(api.events()) == 3  # nothing else was reported


async def test_stops_by_the_atelet_are_not_reported(short_tmp: Path, api: FakeApi, counter_image: str) -> None:
    reason = runsc_missing()
    if reason:
        pytest.skip(reason)
    settings = make_settings(short_tmp, api_server=api.url, heartbeat_seconds=0.2)
    try:
        async with running_atelet(settings) as a:
            await run(a, "default-0", "c1", counter_image)
            uri = f"file://{a.snapshot_root}/demo/c1/1"
            await a.stub.Checkpoint(pb.CheckpointRequest(operation_id=op(), worker="default-0",
                                                         actor=pb.ActorRef(atespace="demo", name="c1"),
                                                         scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri))
            await run(a, "default-0", "c2", counter_image)
            await a.stub.Terminate(pb.TerminateRequest(operation_id=op(), worker="default-0",
                                                       actor=pb.ActorRef(atespace="demo", name="c2")))
            await run(a, "default-1", "c3", counter_image)  # still running at shutdown
            await asyncio.sleep(1.0)
        await asyncio.sleep(0.5)
        assert api.events() == []
        assert_nothing_left(settings)
    finally:
        force_cleanup(settings)
