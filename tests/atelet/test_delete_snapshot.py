"""DeleteSnapshot: the same path checks as Checkpoint/Restore, idempotent, empty parents removed."""

from __future__ import annotations

import uuid
from pathlib import Path

import grpc
import pytest

from atelet.proto import atelet_pb2 as pb
from tests.atelet.conftest import Atelet, counter_spec, make_settings, running_atelet

pytestmark = [pytest.mark.asyncio]
ACTOR = pb.ActorRef(atespace="demo", name="c1")


def op() -> str:
    return f"op-{uuid.uuid4().hex[:12]}"


async def delete(a: Atelet, uri: str, op_id: str | None = None) -> pb.DeleteSnapshotResponse:
    return await a.stub.DeleteSnapshot(pb.DeleteSnapshotRequest(operation_id=op_id or op(), snapshot_uri=uri))


@pytest.mark.parametrize("uri", [
    "s3://bucket/demo/c1/1",
    "file://otherhost/x",
    "file:relative/path",
    "{outside}/victim",
    "file://{outside}/victim",
    "file://{snaps}/../outside/victim",
    "file://{snaps}/demo/../../outside/victim",
    "file://{snaps}/escape/victim",
    "file://{snaps}/escape",
    "file://{snaps}",
])
async def test_refuses_anything_outside_the_snapshot_roots(tmp_path: Path, uri: str) -> None:
    settings = make_settings(tmp_path, hollow=True)
    snaps, outside = tmp_path / "snapshots", tmp_path / "outside"
    (outside / "victim").mkdir(parents=True)
    (outside / "victim" / "keep").write_text("x")
    snaps.mkdir()
    (snaps / "escape").symlink_to(outside)
    async with running_atelet(settings) as a:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await delete(a, uri.format(snaps=snaps, outside=outside))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "snapshot_uri" in (err.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await a.stub.DeleteSnapshot(pb.DeleteSnapshotRequest(snapshot_uri=f"file://{snaps}/x"))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # operation_id is required
    assert (outside / "victim" / "keep").read_text() == "x"
    assert (snaps / "escape").is_symlink()


async def test_deletes_idempotently_and_removes_empty_parents(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, hollow=True)
    snaps, outside = (tmp_path / "snapshots").resolve(), tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    gen1, gen2 = snaps / "demo/c1/1", snaps / "demo/c1/2"
    for gen in (gen1, gen2):
        (gen / "checkpoint").mkdir(parents=True)
        (gen / "manifest.json").write_text("{}")
        (gen / "checkpoint" / "pages.img").write_bytes(b"\0" * 1000)
    (gen1 / "link-out").symlink_to(outside)  # removed, never followed
    leftover = snaps / "demo/c1/.ate-staging-1-0123456789ab"
    leftover.mkdir()
    (leftover / "partial").write_text("x")
    async with running_atelet(settings) as a:
        op_id = op()
        assert (await delete(a, f"file://{gen1}", op_id)).existed
        assert not gen1.exists() and not leftover.exists() and gen2.is_dir()
        assert (outside / "precious").read_text() == "keep me"
        assert not (await delete(a, f"file://{gen1}", op_id)).existed  # the same call again
        assert not (await delete(a, f"file://{gen1}")).existed

        assert (await delete(a, f"file://{gen2}")).existed
        assert not (snaps / "demo").exists()  # empty parents are removed...
        assert snaps.is_dir()  # ...up to, not including, the root
        assert not (await delete(a, f"file://{snaps}/never/was/there")).existed
        (snaps / "afile").write_text("x")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await delete(a, f"file://{snaps}/afile")
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


@pytest.mark.runsc
async def test_deletes_a_real_checkpoint(atelet: Atelet, counter_image: str) -> None:
    await atelet.stub.Run(pb.RunRequest(operation_id=op(), worker="default-0", actor=ACTOR,
                                        spec=counter_spec(counter_image), probe_timeout_seconds=20))
    uri = f"file://{atelet.snapshot_root}/demo/c1/1"
    ckpt = await atelet.stub.Checkpoint(pb.CheckpointRequest(operation_id=op(), worker="default-0", actor=ACTOR,
                                                             scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri))
    assert ckpt.size_bytes > 0
    assert (await delete(atelet, uri)).existed
    assert list(atelet.snapshot_root.iterdir()) == []
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await atelet.stub.Restore(pb.RestoreRequest(operation_id=op(), worker="default-1", actor=ACTOR,
                                                    spec=counter_spec(counter_image), snapshot_uri=uri,
                                                    manifest=ckpt.manifest, probe_timeout_seconds=20))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert not (await delete(atelet, uri)).existed
