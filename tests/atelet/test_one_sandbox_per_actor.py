"""A node runs at most one sandbox of an actor: its durable dirs are the node's, so a second sandbox
would share them, and starting it empties them under the first (the resumed actor of a stuck
resume lost its /data that way in a CI run, `tests/e2e/test_lifecycle.py`). A Run or Restore of an
actor that runs, or is being started, on another worker of the node is refused as retryable."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from pathlib import Path

import grpc
import httpx
import pytest

from atelet.proto import atelet_pb2 as pb
from tests.atelet.conftest import assert_nothing_left, counter_spec, force_cleanup, make_settings, running_atelet

pytestmark = [pytest.mark.asyncio, pytest.mark.runsc]

C1 = pb.ActorRef(atespace="demo", name="c1")


def run(worker: str, spec: pb.WorkloadSpec) -> pb.RunRequest:
    """A Run of demo/c1 on `worker` under a new operation ID."""
    return pb.RunRequest(operation_id=f"op-{uuid.uuid4().hex[:12]}", worker=worker, actor=C1, spec=spec,
                         probe_timeout_seconds=20)


async def count(ip: str) -> dict[str, int]:
    """One request to the counter at `ip`: its memory and file counts (asserts a 200)."""
    async with httpx.AsyncClient(timeout=5) as client:
        reply = await client.get(f"http://{ip}:8080/", headers={"Connection": "close"})
    assert reply.status_code == 200, reply.text
    return {"memory": reply.json()["memory_count"], "file": reply.json()["file_count"]}


async def test_an_actor_running_on_one_worker_is_not_started_on_another(short_tmp: Path, counter_image: str) -> None:
    settings = make_settings(short_tmp)
    spec = counter_spec(counter_image)
    try:
        async with running_atelet(settings) as a:
            await a.stub.Run(run("default-0", spec))
            ip0 = (await a.stub.Health(pb.HealthRequest())).workers[0].ip
            assert await count(ip0) == {"memory": 1, "file": 1}
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await a.stub.Run(run("default-1", spec))
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert refused.value.details().startswith(
                f"actor demo/c1 already runs on worker default-0 of node {settings.node}"
            ), refused.value.details()
            states = [w.sandbox_state for w in (await a.stub.Health(pb.HealthRequest())).workers]
            assert states == ["running", "idle"]
            # The first sandbox kept its durable dir: the count written before is read back.
            assert await count(ip0) == {"memory": 2, "file": 2}
        assert_nothing_left(settings)
    finally:
        force_cleanup(settings)


async def test_of_two_starts_of_one_actor_at_once_one_is_refused(short_tmp: Path, counter_image: str) -> None:
    settings = make_settings(short_tmp)
    spec = counter_spec(counter_image)
    try:
        async with running_atelet(settings) as a:
            outcomes = await asyncio.gather(
                a.stub.Run(run("default-0", spec)), a.stub.Run(run("default-1", spec)), return_exceptions=True
            )
            refused = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
            assert len(refused) == 1, outcomes
            assert refused[0].code() == grpc.StatusCode.UNAVAILABLE, refused[0].details()
            workers = (await a.stub.Health(pb.HealthRequest())).workers
            [running] = [w for w in workers if w.sandbox_state == "running"]
            assert await count(running.ip) == {"memory": 1, "file": 1}
        assert_nothing_left(settings)
    finally:
        force_cleanup(settings)


async def test_a_terminate_of_the_actors_old_sandbox_leaves_its_new_one_the_durable_dir(
        short_tmp: Path, counter_image: str) -> None:
    # c1's sandbox on default-0 exited and c1 was started again on default-1 of the same node (the
    # guard allows it: nothing runs on default-0). A late Terminate of the old one (a rollback or a
    # revert that reached the node only now) must leave the dir the new sandbox uses.
    settings = make_settings(short_tmp)
    spec = counter_spec(counter_image)
    try:
        async with running_atelet(settings) as a:
            await a.stub.Run(run("default-0", spec))
            root = Path(settings.state_dir).resolve() / "runsc"
            [old] = [c for c in subprocess.run(["runsc", f"--root={root}", "list", "-quiet"], capture_output=True,
                                               text=True, check=True).stdout.split() if c.startswith("default-0-")]
            subprocess.run(["runsc", f"--root={root}", "kill", old, "KILL"], check=True)
            deadline = time.monotonic() + 10
            while (await a.stub.Health(pb.HealthRequest())).workers[0].sandbox_state != "exited":
                assert time.monotonic() < deadline, "the killed sandbox was never seen to exit"
                await asyncio.sleep(0.05)
            await a.stub.Run(run("default-1", spec))
            ip1 = (await a.stub.Health(pb.HealthRequest())).workers[1].ip
            assert await count(ip1) == {"memory": 1, "file": 1}
            done = await a.stub.Terminate(pb.TerminateRequest(operation_id=f"op-{uuid.uuid4().hex[:12]}",
                                                              worker="default-0", actor=C1))
            assert not done.was_running  # it had exited
            states = [w.sandbox_state for w in (await a.stub.Health(pb.HealthRequest())).workers]
            assert states == ["idle", "running"]
            assert await count(ip1) == {"memory": 2, "file": 2}  # its /data is still there
        assert_nothing_left(settings)
    finally:
        force_cleanup(settings)
