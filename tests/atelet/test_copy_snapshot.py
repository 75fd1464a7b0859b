"""CopySnapshot: a local snapshot is uploaded to the storage location, verified, staged, idempotent."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import json_format

from atelet.errors import AteletError
from atelet.proto import atelet_pb2 as pb
from atelet.snapshots import SnapshotStore
from tests.atelet.conftest import Atelet, counter_spec, make_settings, running_atelet

ACTOR = pb.ActorRef(atespace="demo", name="c1")


def op() -> str:
    return f"op-{uuid.uuid4().hex[:12]}"


def local_root_of(state_dir: Path) -> Path:
    """Where the atelet must keep LOCAL snapshots by default (the documented layout)."""
    return Path(state_dir).resolve() / "local-snapshots"


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


FILES = {"checkpoint/checkpoint.img": b"memory " * 5000, "checkpoint/pages.img": b"\x00\x01" * 3000,
         "volumes/data.tar": b"tar" * 100}


def write_snapshot(directory: Path, files: dict[str, bytes] = FILES) -> pb.SnapshotManifest:
    """A completed snapshot written by hand (manifest.json in proto JSON), and its manifest."""
    entries = [{"path": p, "sha256": hashlib.sha256(c).hexdigest(), "size_bytes": str(len(c))}
               for p, c in sorted(files.items())]
    doc = {"sandbox_class": "gvisor", "scope": "SNAPSHOT_SCOPE_FULL", "runsc_version": "test",
           "files": entries, "actor": {"atespace": "demo", "name": "c1"}, "created_by_operation": "pause-1"}
    for path, content in files.items():
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_bytes(content)
    (directory / "manifest.json").write_text(json.dumps(doc))
    return json_format.ParseDict(doc, pb.SnapshotManifest())


def assert_real_copy(source: Path, dest: Path, files: list[str]) -> None:
    """``dest`` holds byte-equal, independent copies (no hardlinks) of ``source``'s files."""
    for rel in files:
        a, b = source / rel, dest / rel
        assert b.read_bytes() == a.read_bytes(), rel
        assert not os.path.samefile(a, b), rel
        assert b.stat().st_nlink == 1 and a.stat().st_nlink == 1, rel


# ---- the store itself ------------------------------------------------------------------------

@pytest.fixture
def store(tmp_path: Path) -> SnapshotStore:
    return SnapshotStore([tmp_path / "snaps"], tmp_path / "local")


async def test_store_copy_and_errors(tmp_path: Path, store: SnapshotStore) -> None:
    source = tmp_path / "local/actor/demo/c1/3"
    manifest = write_snapshot(source)
    dest_uri = f"file://{tmp_path}/snaps/demo/c1/3"
    copied, did = await store.copy("local:///actor/demo/c1/3", dest_uri, pb.SnapshotManifest())
    assert did and copied == manifest
    dest = tmp_path / "snaps/demo/c1/3"
    assert_real_copy(source, dest, list(FILES))
    assert json_format.Parse((dest / "manifest.json").read_text(), pb.SnapshotManifest()) == manifest
    assert tree(dest.parent) == ["3", *(f"3/{p}" for p in tree(dest))]  # no staging left
    assert await store.copy("local:///actor/demo/c1/3", dest_uri, manifest) == (manifest, False)

    with pytest.raises(AteletError) as err:
        await store.copy("local:///actor/demo/c1/9", f"file://{tmp_path}/snaps/demo/c1/9", pb.SnapshotManifest())
    assert err.value.code == grpc.StatusCode.NOT_FOUND
    assert "local:///actor/demo/c1/9" in err.value.reason and "gone from this node" in err.value.reason
    for src, dst, field in [("local:///actor/demo/c1/3", "local:///actor/demo/c1/3", "destination_uri"),
                            ("local:///actor/demo/c1/3", "local:///actor/demo/c1/3/sub", "destination_uri"),
                            ("local:///actor/demo/c1/3/checkpoint", "local:///actor/demo/c1", "destination_uri"),
                            ("s3://b/x", dest_uri, "source_uri")]:
        with pytest.raises(AteletError) as err:
            await store.copy(src, dst, manifest)
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT, (src, dst)
        assert err.value.reason.startswith(f"{field}: "), (src, dst)


# ---- over gRPC, hollow (real files, no sandbox) ----------------------------------------------

async def test_copy_over_grpc(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, hollow=True)
    local = local_root_of(settings.state_dir)
    snaps = (tmp_path / "snapshots").resolve()
    source = local / "actor/demo/c1/3"
    manifest = write_snapshot(source)
    size = sum(len(c) for c in FILES.values())
    async with running_atelet(settings) as a:
        async def copy(src: str, dst: str, manifest: pb.SnapshotManifest, op_id: str | None = None
                       ) -> pb.CopySnapshotResponse:
            response: pb.CopySnapshotResponse = await a.stub.CopySnapshot(pb.CopySnapshotRequest(
                operation_id=op_id or op(), source_uri=src, destination_uri=dst, manifest=manifest))
            return response

        dest_uri = f"file://{snaps}/demo/c1/3"
        first_op = op()
        first = await copy("local:///actor/demo/c1/3", dest_uri, manifest, first_op)
        assert first.manifest == manifest and first.size_bytes == size and first.copy_seconds > 0
        dest = snaps / "demo/c1/3"
        assert_real_copy(source, dest, list(FILES))
        assert json_format.Parse((dest / "manifest.json").read_text(), pb.SnapshotManifest()) == manifest
        inode = (dest / "checkpoint/checkpoint.img").stat().st_ino

        # Repeats: the same operation, a new one, a new one with the stored manifest: no second copy.
        assert (await copy("local:///actor/demo/c1/3", dest_uri, manifest, first_op)) == first
        for m in (manifest, pb.SnapshotManifest()):
            again = await copy("local:///actor/demo/c1/3", dest_uri, m)
            assert again.manifest == manifest and again.size_bytes == size
        assert (dest / "checkpoint/checkpoint.img").stat().st_ino == inode
        assert tree(snaps) == ["demo", "demo/c1", "demo/c1/3", *(f"demo/c1/3/{p}" for p in tree(dest))]

        # A corrupted source: the first mismatching file is named, nothing appears at the destination.
        flip_a_byte(source / "checkpoint/pages.img")
        for m in (manifest, pb.SnapshotManifest()):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await copy("local:///actor/demo/c1/3", f"file://{snaps}/demo/c1/4", m)
            assert err.value.code() == grpc.StatusCode.DATA_LOSS
            assert "checkpoint/pages.img" in (err.value.details() or "")
            assert "source_uri" in (err.value.details() or "")
        assert not (snaps / "demo/c1/4").exists()
        assert sorted(os.listdir(snaps / "demo/c1")) == ["3"]  # no staging dir left behind
        (source / "volumes/data.tar").write_bytes(b"short")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await copy("local:///actor/demo/c1/3", f"file://{snaps}/demo/c1/4", manifest)
        assert err.value.code() == grpc.StatusCode.DATA_LOSS
        assert "volumes/data.tar" in (err.value.details() or "")
        # The upload already done still answers (it does not need the source).
        assert (await copy("local:///actor/demo/c1/3", dest_uri, manifest)).manifest == manifest

        # A destination holding something else.
        other = local / "actor/demo/c2/1"
        write_snapshot(other, {"volumes/data.tar": b"other"})
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await copy("local:///actor/demo/c2/1", dest_uri, pb.SnapshotManifest())
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "destination_uri" in (err.value.details() or "")
        (snaps / "junk").mkdir()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await copy("local:///actor/demo/c2/1", f"file://{snaps}/junk", pb.SnapshotManifest())
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "destination_uri" in (err.value.details() or "")

        # Bad URIs name their field; a missing operation_id is refused.
        for src, dst, field in [("local:///../x", f"file://{snaps}/demo/c1/5", "source_uri"),
                                ("local:///actor/demo/c1/3", "file:///etc", "destination_uri"),
                                ("local:///actor/demo/c1/3", f"file://{local}/actor/x", "destination_uri"),
                                (f"file://{snaps}/../x", f"file://{snaps}/demo/c1/5", "source_uri")]:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await copy(src, dst, manifest)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (src, dst)
            assert field in (err.value.details() or ""), (src, dst)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await a.stub.CopySnapshot(pb.CopySnapshotRequest(
                source_uri="local:///actor/demo/c2/1", destination_uri=f"file://{snaps}/demo/c2/1"))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert not (snaps / "demo/c2").exists()

        # Hollow: a source its Checkpoint never wrote is answered with the request's manifest.
        hollow = await copy("local:///actor/demo/c9/1", f"file://{snaps}/demo/c9/1", manifest)
        assert hollow.manifest == manifest and hollow.size_bytes == 0
        assert not (snaps / "demo/c9").exists()
    assert (source / "checkpoint/checkpoint.img").read_bytes() == FILES["checkpoint/checkpoint.img"]  # left in place


# ---- real runsc --------------------------------------------------------------------------------

async def get(ip: str) -> dict[str, Any]:
    """One GET / of the counter on a fresh connection that is closed afterwards."""
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.get(f"http://{ip}:8080/", headers={"Connection": "close"})
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body


@pytest.mark.runsc
async def test_upload_of_a_paused_counter_restores_with_its_count(atelet: Atelet, counter_image: str) -> None:
    run = await atelet.stub.Run(pb.RunRequest(operation_id=op(), worker="default-0", actor=ACTOR,
                                              spec=counter_spec(counter_image), probe_timeout_seconds=20))
    for n in (1, 2):
        assert (await get(run.worker_ip)) == {"ip": run.worker_ip, "memory_count": n, "file_count": n}
    local_uri = "local:///actor/demo/c1/3"
    ckpt = await atelet.stub.Checkpoint(pb.CheckpointRequest(
        operation_id=op(), worker="default-0", actor=ACTOR, scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=local_uri))
    local = local_root_of(atelet.settings.state_dir)
    source = local / "actor/demo/c1/3"
    files = sorted(f.path for f in ckpt.manifest.files)
    source_sums = {p: sha256(source / p) for p in files}
    assert source_sums == {f.path: f.sha256 for f in ckpt.manifest.files}
    assert tree(atelet.snapshot_root) == []

    dest_uri = f"file://{atelet.snapshot_root}/demo/c1/3"
    req = pb.CopySnapshotRequest(operation_id=op(), source_uri=local_uri, destination_uri=dest_uri,
                                 manifest=ckpt.manifest)
    up = await atelet.stub.CopySnapshot(req)
    assert up.manifest == ckpt.manifest
    assert up.size_bytes == sum((source / p).stat().st_size for p in files)
    dest = atelet.snapshot_root / "demo/c1/3"
    assert {p: sha256(dest / p) for p in files} == source_sums
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == sorted([*files, "manifest.json"])
    assert_real_copy(source, dest, files)
    assert (await atelet.stub.CopySnapshot(req)).manifest == ckpt.manifest  # same operation
    fresh = pb.CopySnapshotRequest(operation_id=op(), source_uri=local_uri, destination_uri=dest_uri)
    assert (await atelet.stub.CopySnapshot(fresh)).manifest == ckpt.manifest  # new operation, stored manifest

    # A corrupted local copy cannot be uploaded elsewhere.
    biggest = max(ckpt.manifest.files, key=lambda f: f.size_bytes).path
    saved = (source / biggest).read_bytes()
    flip_a_byte(source / biggest)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await atelet.stub.CopySnapshot(pb.CopySnapshotRequest(
            operation_id=op(), source_uri=local_uri, destination_uri=f"file://{atelet.snapshot_root}/demo/c1/4",
            manifest=ckpt.manifest))
    assert err.value.code() == grpc.StatusCode.DATA_LOSS
    assert biggest in (err.value.details() or "")
    assert not (atelet.snapshot_root / "demo/c1/4").exists()
    (source / biggest).write_bytes(saved)

    # The local copy is deleted (the suspend finished); the uploaded one restores the count.
    assert (await atelet.stub.DeleteSnapshot(pb.DeleteSnapshotRequest(operation_id=op(), snapshot_uri=local_uri))).existed
    assert local.is_dir() and tree(local) == []
    restored = await atelet.stub.Restore(pb.RestoreRequest(
        operation_id=op(), worker="default-1", actor=ACTOR, spec=counter_spec(counter_image),
        snapshot_uri=dest_uri, manifest=up.manifest, probe_timeout_seconds=20))
    assert (await get(restored.worker_ip)) == {"ip": restored.worker_ip, "memory_count": 3, "file_count": 3}

    with pytest.raises(grpc.aio.AioRpcError) as err:
        await atelet.stub.CopySnapshot(pb.CopySnapshotRequest(
            operation_id=op(), source_uri=local_uri, destination_uri=f"file://{atelet.snapshot_root}/demo/c1/5",
            manifest=ckpt.manifest))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert local_uri in (err.value.details() or "") and "gone from this node" in (err.value.details() or "")
    # A retry of the finished upload still succeeds without the source.
    assert (await atelet.stub.CopySnapshot(pb.CopySnapshotRequest(
        operation_id=op(), source_uri=local_uri, destination_uri=dest_uri, manifest=ckpt.manifest))).manifest \
        == ckpt.manifest
    for uri, field in (("local:///../x", "source_uri"), ("file:///etc", "destination_uri")):
        bad = pb.CopySnapshotRequest(operation_id=op(), source_uri=local_uri, destination_uri=dest_uri)
        setattr(bad, field, uri)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await atelet.stub.CopySnapshot(bad)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in (err.value.details() or "")
