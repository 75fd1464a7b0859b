"""Freeze and Thaw (issue 27, the hot tier) on real runsc: a frozen counter uses no CPU (read from
its cgroup) and answers nothing; thawed, it answers with its memory. Checkpoint and Terminate of a
frozen sandbox work; the RPCs are idempotent and say so."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import grpc
import httpx
import pytest
from prometheus_client import REGISTRY

from atelet.proto import atelet_pb2 as pb
from atelet.runsc import pid_alive
from tests.atelet.conftest import Atelet, counter_spec

pytestmark = [pytest.mark.runsc, pytest.mark.asyncio]
ACTOR = pb.ActorRef(atespace="demo", name="f1")


def op() -> str:
    return f"op-{uuid.uuid4().hex[:12]}"


async def get(ip: str, timeout: float = 5) -> dict:
    """One GET / on a fresh connection that is closed afterwards."""
    async with httpx.AsyncClient(timeout=timeout) as client:
        response = await client.get(f"http://{ip}:8080/", headers={"Connection": "close"})
        response.raise_for_status()
        return response.json()


def sandbox_pid(a: Atelet, worker: str) -> int:
    """The PID of the sandbox on ``worker``, from runsc's state file (runsc itself cannot answer
    for a frozen sandbox)."""
    from atelet.runsc import Runsc

    runsc = Runsc("runsc", Path(a.settings.state_dir).resolve() / "runsc")
    [cid] = [c for c in runsc.saved_ids() if c.startswith(f"{worker}-")]
    return runsc.saved_pid(cid)


def cpu_usage_ns(pid: int) -> int:
    """CPU time (ns) used by the cgroup of process ``pid``: cpuacct.usage (v1) or cpu.stat's
    usage_usec (v2)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):
            return int((Path("/sys/fs/cgroup") / controllers / path.lstrip("/") / "cpuacct.usage").read_text())
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            stat = (Path("/sys/fs/cgroup") / path.lstrip("/") / "cpu.stat").read_text().split()
            return int(stat[stat.index("usage_usec") + 1]) * 1000
    raise AssertionError(f"no CPU accounting for pid {pid}")


async def hammer(ip: str, seconds: float) -> tuple[int, int]:
    """GET / in a loop for ``seconds`` (each with a 0.2 s timeout); returns (answered, not answered)."""
    answered = failed = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            await get(ip, timeout=0.2)
            answered += 1
        except httpx.HTTPError:
            failed += 1
    return answered, failed


def frozen_gauge() -> float:
    return REGISTRY.get_sample_value("ate_atelet_frozen_sandboxes", {"pool": "default"}) or 0.0


async def run_counter(a: Atelet, worker: str, image: str) -> pb.RunResponse:
    return await a.stub.Run(pb.RunRequest(operation_id=op(), worker=worker, actor=ACTOR,
                                          spec=counter_spec(image), probe_timeout_seconds=20))


async def test_a_frozen_counter_uses_no_cpu_and_thaws_with_its_memory(atelet: Atelet, counter_image: str) -> None:
    run = await run_counter(atelet, "default-0", counter_image)
    ip = run.worker_ip
    assert (await get(ip))["memory_count"] == 1
    pid = sandbox_pid(atelet, "default-0")

    # Running, under requests for 1 s: the sandbox uses CPU.
    before = cpu_usage_ns(pid)
    served, _ = await hammer(ip, 1.0)
    running_ns = cpu_usage_ns(pid) - before
    assert served > 10 and running_ns > 10_000_000, (served, running_ns)
    count = (await get(ip))["memory_count"]
    assert count == served + 2

    freeze = pb.FreezeRequest(operation_id=op(), worker="default-0", actor=ACTOR)
    frozen = await atelet.stub.Freeze(freeze)
    assert not frozen.already_frozen and frozen.method in ("cgroup v1 freezer", "cgroup v2 freezer")
    assert 0 < frozen.freeze_seconds < 1
    [w0, _] = (await atelet.stub.Health(pb.HealthRequest())).workers
    assert (w0.sandbox_state, w0.frozen) == ("running", True)
    assert frozen_gauge() == 1
    assert await atelet.stub.Freeze(freeze) == frozen  # the same operation: its recorded answer
    again = await atelet.stub.Freeze(pb.FreezeRequest(operation_id=op(), worker="default-0", actor=ACTOR))
    assert again.already_frozen and again.freeze_seconds == 0

    # Frozen, under the same requests for 1 s: no answer, and not a nanosecond of CPU.
    before = cpu_usage_ns(pid)
    answered, failed = await hammer(ip, 1.0)
    frozen_ns = cpu_usage_ns(pid) - before
    assert (answered, frozen_ns) == (0, 0) and failed > 0
    assert pid_alive(pid)

    started = time.monotonic()
    thaw = await atelet.stub.Thaw(pb.ThawRequest(operation_id=op(), worker="default-0", actor=ACTOR))
    assert thaw.was_frozen and thaw.method == frozen.method and 0 < thaw.thaw_seconds < 1
    assert (await get(ip))["memory_count"] == count + 1  # its memory, continued
    thaw_and_get = time.monotonic() - started
    assert frozen_gauge() == 0
    assert not (await atelet.stub.Health(pb.HealthRequest())).workers[0].frozen
    twice = await atelet.stub.Thaw(pb.ThawRequest(operation_id=op(), worker="default-0", actor=ACTOR))
    assert not twice.was_frozen and twice.thaw_seconds == 0
    await atelet.stub.Terminate(pb.TerminateRequest(operation_id=op(), worker="default-0", actor=ACTOR))
    print(f"freeze {frozen.freeze_seconds * 1000:.2f} ms, thaw {thaw.thaw_seconds * 1000:.2f} ms "
          f"(Thaw RPC + GET {thaw_and_get * 1000:.1f} ms); CPU over 1 s of requests: running "
          f"{running_ns / 1e6:.1f} ms ({served} answered), frozen {frozen_ns / 1e6:.3f} ms ({failed} unanswered)")


async def test_freeze_and_thaw_refuse_a_worker_without_the_actor(atelet: Atelet, counter_image: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await atelet.stub.Freeze(pb.FreezeRequest(operation_id=op(), worker="nope-0", actor=ACTOR))
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    for call in (atelet.stub.Freeze(pb.FreezeRequest(operation_id=op(), worker="default-1", actor=ACTOR)),
                 atelet.stub.Thaw(pb.ThawRequest(operation_id=op(), worker="default-1", actor=ACTOR))):
        with pytest.raises(grpc.aio.AioRpcError) as idle:
            await call
        assert idle.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "default-1" in (idle.value.details() or "")


async def test_a_frozen_sandbox_checkpoints_and_restores(atelet: Atelet, counter_image: str) -> None:
    run = await run_counter(atelet, "default-0", counter_image)
    assert [(await get(run.worker_ip))["memory_count"] for _ in range(2)] == [1, 2]
    await atelet.stub.Freeze(pb.FreezeRequest(operation_id=op(), worker="default-0", actor=ACTOR))
    uri = f"file://{atelet.snapshot_root}/demo/f1/1"
    ckpt = await asyncio.wait_for(atelet.stub.Checkpoint(pb.CheckpointRequest(
        operation_id=op(), worker="default-0", actor=ACTOR, scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri)), 60)
    assert any(f.path.startswith("checkpoint/") for f in ckpt.manifest.files)
    assert [(w.sandbox_state, w.frozen) for w in (await atelet.stub.Health(pb.HealthRequest())).workers] == [
        ("idle", False), ("idle", False)]
    restored = await atelet.stub.Restore(pb.RestoreRequest(
        operation_id=op(), worker="default-1", actor=ACTOR, spec=counter_spec(counter_image), snapshot_uri=uri,
        manifest=ckpt.manifest, probe_timeout_seconds=20))
    assert (await get(restored.worker_ip))["memory_count"] == 3
    await atelet.stub.Terminate(pb.TerminateRequest(operation_id=op(), worker="default-1", actor=ACTOR))


async def test_terminate_of_a_frozen_sandbox_ends_it_promptly(atelet: Atelet, counter_image: str) -> None:
    run = await run_counter(atelet, "default-0", counter_image)
    assert (await get(run.worker_ip))["memory_count"] == 1
    pid = sandbox_pid(atelet, "default-0")
    await atelet.stub.Freeze(pb.FreezeRequest(operation_id=op(), worker="default-0", actor=ACTOR))
    started = time.monotonic()
    done = await asyncio.wait_for(atelet.stub.Terminate(
        pb.TerminateRequest(operation_id=op(), worker="default-0", actor=ACTOR)), 10)
    seconds = time.monotonic() - started
    assert done.was_running and seconds < 5, seconds
    assert not pid_alive(pid)
    [w0, _] = (await atelet.stub.Health(pb.HealthRequest())).workers
    assert (w0.sandbox_state, w0.frozen) == ("idle", False)
    assert frozen_gauge() == 0
    print(f"terminate of a frozen sandbox: {seconds * 1000:.0f} ms")
