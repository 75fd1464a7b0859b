"""Real runsc, real gRPC, real network namespaces: the counter moves between workers."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import grpc
import httpx
import pytest

from atelet.proto import atelet_pb2 as pb
from tests.atelet.conftest import Atelet, checkpoint_compression, counter_spec, cpu_limit_of_pid

pytestmark = [pytest.mark.runsc, pytest.mark.asyncio]
ACTOR = pb.ActorRef(atespace="demo", name="c1")


def op() -> str:
    return f"op-{uuid.uuid4().hex[:12]}"


async def get(ip: str) -> dict:
    """One GET / on a fresh connection that is closed afterwards."""
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.get(f"http://{ip}:8080/", headers={"Connection": "close"})
        response.raise_for_status()
        return response.json()


async def run_counter(a: Atelet, worker: str, image: str) -> pb.RunResponse:
    return await a.stub.Run(pb.RunRequest(operation_id=op(), worker=worker, actor=ACTOR,
                                          spec=counter_spec(image), probe_timeout_seconds=20))


def cpu_limit_of(a: Atelet, worker: str) -> tuple[int, int]:
    """(quota, period) in µs of the CPU cgroup of the sandbox running on `worker`, read from
    runsc's list and the kernel's files."""
    root = Path(a.settings.state_dir) / "runsc"
    listed = subprocess.run(["runsc", "--root", str(root), "list", "-format=json"],
                            capture_output=True, text=True, check=True)
    [pid] = [c["pid"] for c in json.loads(listed.stdout or "[]")
             if c["id"].startswith(worker) and c["status"] == "running"]
    return cpu_limit_of_pid(pid)


async def test_full_roundtrip_moves_memory_and_data(atelet: Atelet, counter_image: str) -> None:
    run = await run_counter(atelet, "default-0", counter_image)
    assert (await get(run.worker_ip)) == {"ip": run.worker_ip, "memory_count": 1, "file_count": 1}
    # The template's 500m CPU limit holds once the sandbox is up: 50 ms every 100 ms.
    assert cpu_limit_of(atelet, "default-0") == (50_000, 100_000)
    assert (await get(run.worker_ip))["memory_count"] == 2

    uri = f"file://{atelet.snapshot_root}/demo/c1/1"
    ckpt_req = pb.CheckpointRequest(operation_id=op(), worker="default-0", actor=ACTOR,
                                    scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri)
    ckpt = await atelet.stub.Checkpoint(ckpt_req)
    assert ckpt.manifest.scope == pb.SNAPSHOT_SCOPE_FULL
    assert ckpt.manifest.created_by_operation == ckpt_req.operation_id
    assert any(f.path.startswith("checkpoint/") for f in ckpt.manifest.files)
    assert any(f.path == "volumes/data.tar" for f in ckpt.manifest.files)
    assert ckpt.size_bytes == sum(f.size_bytes for f in ckpt.manifest.files)
    # kept on disk: written uncompressed (atelet --checkpoint-compression auto)
    state_file = (atelet.snapshot_root / "demo/c1/1/checkpoint/checkpoint.img").read_bytes()
    assert checkpoint_compression(state_file) == "none"

    # A repeated Checkpoint (same operation_id) returns the same manifest and does nothing else.
    again = await atelet.stub.Checkpoint(ckpt_req)
    assert again.manifest == ckpt.manifest
    health = await atelet.stub.Health(pb.HealthRequest())
    assert [w.sandbox_state for w in health.workers] == ["idle", "idle"]

    restore_req = pb.RestoreRequest(operation_id=op(), worker="default-1", actor=ACTOR,
                                    spec=counter_spec(counter_image), snapshot_uri=uri,
                                    manifest=ckpt.manifest, probe_timeout_seconds=20)
    restored = await atelet.stub.Restore(restore_req)
    assert restored.worker_ip != run.worker_ip
    assert (await get(restored.worker_ip)) == {"ip": restored.worker_ip, "memory_count": 3, "file_count": 3}
    assert cpu_limit_of(atelet, "default-1") == (50_000, 100_000)

    # A repeated Restore (same operation_id) returns the first result: no second restore.
    assert (await atelet.stub.Restore(restore_req)) == restored
    assert (await get(restored.worker_ip))["memory_count"] == 4

    # Another actor cannot take a busy worker.
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await atelet.stub.Run(pb.RunRequest(operation_id=op(), worker="default-1",
                                            actor=pb.ActorRef(atespace="demo", name="other"),
                                            spec=counter_spec(counter_image)))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION

    term = pb.TerminateRequest(operation_id=op(), worker="default-1", actor=ACTOR)
    assert (await atelet.stub.Terminate(term)).was_running
    assert (await atelet.stub.Terminate(term)).was_running  # recorded result
    fresh = pb.TerminateRequest(operation_id=op(), worker="default-1", actor=ACTOR)
    assert not (await atelet.stub.Terminate(fresh)).was_running


async def test_data_roundtrip_keeps_only_files(atelet: Atelet, counter_image: str) -> None:
    run = await run_counter(atelet, "default-0", counter_image)
    await get(run.worker_ip)
    assert (await get(run.worker_ip))["file_count"] == 2

    uri = f"file://{atelet.snapshot_root}/demo/c1/data-1"
    ckpt = await atelet.stub.Checkpoint(pb.CheckpointRequest(
        operation_id=op(), worker="default-0", actor=ACTOR, scope=pb.SNAPSHOT_SCOPE_DATA, snapshot_uri=uri))
    assert [f.path for f in ckpt.manifest.files] == ["volumes/data.tar"]

    restored = await atelet.stub.Restore(pb.RestoreRequest(
        operation_id=op(), worker="default-1", actor=ACTOR, spec=counter_spec(counter_image),
        snapshot_uri=uri, manifest=ckpt.manifest, probe_timeout_seconds=20))
    assert (await get(restored.worker_ip)) == {"ip": restored.worker_ip, "memory_count": 1, "file_count": 3}


async def test_tampered_snapshot_is_refused(atelet: Atelet, counter_image: str) -> None:
    run = await run_counter(atelet, "default-0", counter_image)
    await get(run.worker_ip)
    uri = f"file://{atelet.snapshot_root}/demo/c1/t"
    ckpt = await atelet.stub.Checkpoint(pb.CheckpointRequest(
        operation_id=op(), worker="default-0", actor=ACTOR, scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri))
    target = Path(atelet.snapshot_root, "demo/c1/t", "volumes/data.tar")
    target.write_bytes(target.read_bytes()[:-1] + b"x")

    req = pb.RestoreRequest(operation_id=op(), worker="default-1", actor=ACTOR, spec=counter_spec(counter_image),
                            snapshot_uri=uri, manifest=ckpt.manifest, probe_timeout_seconds=20)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await atelet.stub.Restore(req)
    assert err.value.code() == grpc.StatusCode.DATA_LOSS  # damaged: no retry of it can succeed
    assert "volumes/data.tar" in (err.value.details() or "")

    wrong_version = pb.SnapshotManifest()
    wrong_version.CopyFrom(ckpt.manifest)
    wrong_version.runsc_version = "0.0~19990101.0"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await atelet.stub.Restore(pb.RestoreRequest(
            operation_id=op(), worker="default-1", actor=ACTOR, spec=counter_spec(counter_image),
            snapshot_uri=uri, manifest=wrong_version))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "runsc_version" in (err.value.details() or "")

    health = await atelet.stub.Health(pb.HealthRequest())
    assert all(w.sandbox_state == "idle" for w in health.workers)
    stored = json.loads(Path(atelet.snapshot_root, "demo/c1/t/manifest.json").read_text())
    assert stored["created_by_operation"] == ckpt.manifest.created_by_operation
