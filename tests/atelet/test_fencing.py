"""The heartbeat answer's ``terminate`` list fences sandboxes, never an operation in flight."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from atelet.node import Node
from atelet.pool import default_pool
from atelet.proto import atelet_pb2 as pb
from tests.atelet.conftest import (
    assert_nothing_left,
    counter_spec,
    force_cleanup,
    make_settings,
    running_atelet,
    runsc_missing,
)
from tests.atelet.fake_api import fake_api

pytestmark = [pytest.mark.asyncio]


def op() -> str:
    return f"op-{uuid.uuid4().hex[:12]}"


async def until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def ref(name: str) -> dict[str, str]:
    return {"atespace": "demo", "name": name}


@pytest.mark.runsc
async def test_terminate_list_fences_the_running_actor_only(
        short_tmp: Path, counter_image: str, caplog: pytest.LogCaptureFixture) -> None:
    reason = runsc_missing()
    if reason:
        pytest.skip(reason)
    caplog.set_level(logging.INFO, logger="atelet")
    with fake_api() as api:
        settings = make_settings(short_tmp, api_server=api.url, heartbeat_seconds=0.2)
        try:
            async with running_atelet(settings) as a:
                for worker, name in (("default-0", "c1"), ("default-1", "c2")):
                    await a.stub.Run(pb.RunRequest(operation_id=op(), worker=worker,
                                                   actor=pb.ActorRef(atespace="demo", name=name),
                                                   spec=counter_spec(counter_image), probe_timeout_seconds=20))
                health = await a.stub.Health(pb.HealthRequest())
                ip1 = health.workers[1].ip
                # c1 is fenced; the rest names actors that are not there (or is malformed): ignored.
                api.terminate = [
                    {"worker": "default-0", "actor": ref("c1")},
                    {"worker": "default-1", "actor": ref("elsewhere")},
                    {"worker": "default-9", "actor": ref("c2")},
                    {"worker": "default-1"},
                    {"bogus": True},
                ]
                fenced_at = len(api.of("PUT", ""))
                states: list[str] = []

                async def poll() -> None:
                    health = await a.stub.Health(pb.HealthRequest())
                    states[:] = [w.sandbox_state for w in health.workers]

                for _ in range(250):
                    await poll()
                    if states[0] == "idle":
                        break
                    await asyncio.sleep(0.02)
                assert states == ["idle", "running"]
                api.terminate = []
                root = Path(settings.state_dir).resolve() / "runsc"
                assert await until(lambda: [c for c in subprocess.run(
                    ["runsc", f"--root={root}", "list", "-quiet"], capture_output=True, text=True).stdout.split()
                    if c.startswith("default-0-")] == [], 5)
                assert not (Path(settings.state_dir).resolve() / "actors/demo/c1").exists()
                # The next heartbeat reports the worker empty; c2 still answers.
                assert await until(lambda: len(api.of("PUT", "")) > fenced_at + 2)
                workers = api.of("PUT", "")[-1].body["workers"]
                assert [w["actor"] for w in workers] == [None, ref("c2")]
                async with httpx.AsyncClient(timeout=5) as client:
                    reply = await client.get(f"http://{ip1}:8080/", headers={"Connection": "close"})
                    assert reply.json()["memory_count"] == 1
                assert api.events() == []  # a fenced sandbox is not an exit on its own
            assert_nothing_left(settings)
        finally:
            force_cleanup(settings)
    fenced = [r.getMessage() for r in caplog.records if r.getMessage().startswith("fenced:")]
    assert fenced == ["fenced: terminated demo/c1 on default-0 at the control plane's request"]


@pytest.mark.runsc
async def test_fencing_an_old_sandbox_leaves_the_actors_new_one_its_durable_dir(
        short_tmp: Path, counter_image: str) -> None:
    # c1's sandbox on default-0 exited; c1 was reverted and resumed on default-1 of the same node
    # before the heartbeat's answer fenced the old one: the fence must not delete the dir (the
    # durable /data) the new sandbox uses. The counter answers 500 once /data is gone.
    reason = runsc_missing()
    if reason:
        pytest.skip(reason)
    with fake_api() as api:
        settings = make_settings(short_tmp, api_server=api.url, heartbeat_seconds=0.2)
        try:
            async with running_atelet(settings) as a:
                c1 = pb.ActorRef(atespace="demo", name="c1")
                spec = counter_spec(counter_image)
                await a.stub.Run(pb.RunRequest(operation_id=op(), worker="default-0", actor=c1, spec=spec,
                                               probe_timeout_seconds=20))
                root = Path(settings.state_dir).resolve() / "runsc"
                [old] = [c for c in subprocess.run(["runsc", f"--root={root}", "list", "-quiet"], capture_output=True,
                                                   text=True).stdout.split() if c.startswith("default-0-")]
                subprocess.run(["runsc", f"--root={root}", "kill", old, "KILL"], check=True)

                async def state_of(worker: int) -> str:
                    return (await a.stub.Health(pb.HealthRequest())).workers[worker].sandbox_state

                for _ in range(250):
                    if await state_of(0) == "exited":
                        break
                    await asyncio.sleep(0.02)
                assert await state_of(0) == "exited"
                await a.stub.Run(pb.RunRequest(operation_id=op(), worker="default-1", actor=c1, spec=spec,
                                               probe_timeout_seconds=20))
                api.terminate = [{"worker": "default-0", "actor": ref("c1")}]
                for _ in range(250):
                    if await state_of(0) == "idle":
                        break
                    await asyncio.sleep(0.02)
                api.terminate = []
                assert [await state_of(0), await state_of(1)] == ["idle", "running"]
                assert (Path(settings.state_dir).resolve() / "actors/demo/c1").exists()
                ip1 = (await a.stub.Health(pb.HealthRequest())).workers[1].ip
                async with httpx.AsyncClient(timeout=5) as client:
                    reply = await client.get(f"http://{ip1}:8080/", headers={"Connection": "close"})
                assert reply.status_code == 200, reply.text  # its /data is still there
                assert reply.json()["file_count"] == 1
            assert_nothing_left(settings)
        finally:
            force_cleanup(settings)


async def test_fence_never_interrupts_an_operation(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, hollow=True)
    node = Node(settings, [default_pool(1)])
    await node.start()
    worker = node.workers["default-0"]
    worker.actor, worker.state = ("demo", "c1"), "running"

    async with worker.lock:  # e.g. a Checkpoint holds the worker
        assert not await node.fence("default-0", ("demo", "c1"))
    worker.inflight = 1  # e.g. a Restore still validating its request
    assert not await node.fence("default-0", ("demo", "c1"))
    worker.inflight = 0
    assert not await node.fence("default-0", ("demo", "other"))
    assert worker.state == "running"
    assert await node.fence("default-0", ("demo", "c1"))
    assert (worker.state, worker.actor) == ("idle", None)
    await node.stop()


async def test_inflight_counts_a_running_operation(tmp_path: Path) -> None:
    """An operation is counted on its worker from its first line to its end."""
    settings = make_settings(tmp_path, hollow=True)
    node = Node(settings, [default_pool(1)])
    await node.start()
    worker = node.workers["default-0"]
    seen = []
    async with worker.lock:
        task = asyncio.create_task(node.run(pb.RunRequest(
            operation_id=op(), worker="default-0", actor=pb.ActorRef(atespace="demo", name="c1"),
            spec=counter_spec())))
        await asyncio.sleep(0.05)
        seen.append(worker.inflight)
    await task
    assert seen == [1] and worker.inflight == 0
    assert not await node.fence("default-0", ("demo", "c2"))
    assert await node.fence("default-0", ("demo", "c1"))
    await node.stop()
