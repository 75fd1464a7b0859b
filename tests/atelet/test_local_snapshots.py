"""LOCAL snapshots: ``local:///<path>`` URIs name directories under ``<state_dir>/local-snapshots``.

Checkpoint, Restore and DeleteSnapshot take them like ``file://`` ones, with the same confinement;
``file://`` URIs cannot reach into the local root; the atelet's start removes staging leftovers
there.
"""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from atelet.errors import AteletError
from atelet.main import main, parse_args
from atelet.proto import atelet_pb2 as pb
from atelet.snapshots import SnapshotRootError, SnapshotStore
from tests.atelet.conftest import Atelet, counter_spec, make_settings, running_atelet

ACTOR = pb.ActorRef(atespace="demo", name="c1")


def op() -> str:
    return f"op-{uuid.uuid4().hex[:12]}"


def local_root_of(state_dir: Path) -> Path:
    """Where the atelet must keep LOCAL snapshots by default (the documented layout)."""
    return Path(state_dir).resolve() / "local-snapshots"


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


async def get(ip: str) -> dict[str, Any]:
    """One GET / of the counter on a fresh connection that is closed afterwards."""
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.get(f"http://{ip}:8080/", headers={"Connection": "close"})
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body


# ---- URI resolution (no atelet) -------------------------------------------------------------

@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(snapshot root, local root, a dir outside both); the local root has a symlink out."""
    snaps, local, outside = tmp_path / "snapshots", tmp_path / "local", tmp_path / "outside"
    for d in (snaps, local, outside):
        d.mkdir()
    (local / "escape").symlink_to(outside)
    (local / "to-snaps").symlink_to(snaps)
    return snaps, local, outside


def test_local_uri_resolves_under_the_local_root(layout: tuple[Path, Path, Path]) -> None:
    snaps, local, _ = layout
    store = SnapshotStore([snaps], local)
    assert store.resolve("local:///actor/demo/c1/3") == local.resolve() / "actor" / "demo" / "c1" / "3"
    assert store.resolve("local:/actor/x") == local.resolve() / "actor" / "x"
    assert store.resolve("local:///a%20b/1") == local.resolve() / "a b" / "1"


@pytest.mark.parametrize("uri", [
    "local:///../x",
    "local:///actor/../../x",
    "local:///a/%2E%2E/%2E%2E/x",
    "local://host/x",
    "local:///a?b=1",
    "local:///a#frag",
    "local:relative/x",
    "local:///",
    "local://",
    "local:///escape/x",
    "local:///escape",
    "local:///to-snaps/demo/1",
    "local:///a\0b",
])
def test_bad_local_uris_are_invalid(layout: tuple[Path, Path, Path], uri: str) -> None:
    snaps, local, _ = layout
    with pytest.raises(AteletError) as err:
        SnapshotStore([snaps], local).resolve(uri, "source_uri")
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.reason.startswith("source_uri: ")


def test_local_uris_need_a_local_root(tmp_path: Path) -> None:
    with pytest.raises(AteletError) as err:
        SnapshotStore([tmp_path]).resolve("local:///actor/demo/c1/1")
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "snapshot_uri" in err.value.reason


def test_file_uris_do_not_reach_into_the_local_root(tmp_path: Path) -> None:
    local = tmp_path / "state" / "local-snapshots"
    local.mkdir(parents=True)
    (tmp_path / "link").symlink_to(local)
    store = SnapshotStore([tmp_path], local)  # the snapshot root holds the local root
    for uri in (f"file://{local}/actor/demo/c1/1", f"file://{tmp_path}/link/actor/1", f"file://{local}"):
        with pytest.raises(AteletError) as err:
            store.resolve(uri)
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT, uri
        assert "snapshot_uri" in err.value.reason and "local" in err.value.reason
    assert store.resolve(f"file://{tmp_path}/state/other/1") == tmp_path.resolve() / "state/other/1"
    # Listed among the snapshot roots as well: then file:// may name it too.
    both = SnapshotStore([tmp_path, local], local)
    assert both.resolve(f"file://{local}/actor/1") == both.resolve("local:///actor/1") == local.resolve() / "actor/1"


def test_a_local_root_holding_a_snapshot_root_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SnapshotRootError):
        SnapshotStore([tmp_path / "local" / "snaps"], tmp_path / "local")
    with pytest.raises(SnapshotRootError):
        SnapshotStore([tmp_path / "snaps"], tmp_path)


# ---- over gRPC, hollow (every check is real, no sandbox) -----------------------------------

def fake_snapshot(directory: Path, content: bytes = b"pages") -> None:
    (directory / "checkpoint").mkdir(parents=True)
    (directory / "checkpoint" / "pages.img").write_bytes(content)
    (directory / "manifest.json").write_text("{}")


async def test_start_removes_local_staging_leftovers_only(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, hollow=True)
    local = local_root_of(settings.state_dir)
    snaps = (tmp_path / "snapshots").resolve()
    leftover = local / "actor/demo/c1/.ate-staging-3-0123456789ab"
    (leftover / "checkpoint").mkdir(parents=True)
    (leftover / "checkpoint" / "partial.img").write_bytes(b"x" * 100)
    deep_leftover = local / "actor/demo/c2/x/.ate-staging-1-ba9876543210"
    deep_leftover.mkdir(parents=True)
    fake_snapshot(local / "actor/demo/c1/2")
    inside_completed = local / "actor/demo/c1/2/.ate-staging-keep"  # inside a snapshot: not ours to judge
    inside_completed.mkdir()
    shared_leftover = snaps / "demo/c1/.ate-staging-1-0123456789ab"  # the storage location: left alone
    shared_leftover.mkdir(parents=True)
    async with running_atelet(settings) as a:
        await a.stub.Health(pb.HealthRequest())
        assert not leftover.exists() and not deep_leftover.exists()
        assert (local / "actor/demo/c1/2/checkpoint/pages.img").read_bytes() == b"pages"
        assert inside_completed.is_dir()
        assert shared_leftover.is_dir()


async def test_start_creates_the_local_root(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, hollow=True)
    custom = make_settings(tmp_path / "b", hollow=True, local_snapshot_root=tmp_path / "elsewhere")
    async with running_atelet(settings):
        assert local_root_of(settings.state_dir).is_dir()
    async with running_atelet(custom) as a:
        assert (tmp_path / "elsewhere").is_dir()
        assert not local_root_of(custom.state_dir).exists()
        fake_snapshot(tmp_path / "elsewhere" / "actor/1")
        assert (await a.stub.DeleteSnapshot(pb.DeleteSnapshotRequest(
            operation_id=op(), snapshot_uri="local:///actor/1"))).existed
        assert tree(tmp_path / "elsewhere") == []


async def test_delete_local_snapshot_removes_empty_parents_not_the_root(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, hollow=True)
    local = local_root_of(settings.state_dir)
    snaps = (tmp_path / "snapshots").resolve()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    gen1, gen2 = local / "actor/demo/c1/1", local / "actor/demo/c1/2"
    fake_snapshot(gen1)
    fake_snapshot(gen2)
    (gen1 / "link-out").symlink_to(outside)
    staging = local / "actor/demo/c1/.ate-staging-1-0123456789ab"
    staging.mkdir()
    fake_snapshot(snaps / "actor/demo/c1/1")  # the same relative path in the storage location
    async with running_atelet(settings) as a:
        async def delete(uri: str) -> bool:
            response: pb.DeleteSnapshotResponse = await a.stub.DeleteSnapshot(
                pb.DeleteSnapshotRequest(operation_id=op(), snapshot_uri=uri))
            return response.existed

        assert await delete("local:///actor/demo/c1/1")
        assert not gen1.exists() and gen2.is_dir() and not staging.exists()
        assert (outside / "precious").read_text() == "keep me"
        assert not await delete("local:///actor/demo/c1/1")
        assert await delete("local:///actor/demo/c1/2")
        assert local.is_dir() and tree(local) == []  # parents gone up to, not including, the root
        assert (snaps / "actor/demo/c1/1/checkpoint/pages.img").read_bytes() == b"pages"
        for uri in ("local:///../outside", "local:///", "file:///etc", f"file://{local}/actor"):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await delete(uri)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, uri
            assert "snapshot_uri" in (err.value.details() or "")


async def test_checkpoint_and_restore_check_local_uris(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, hollow=True)
    async with running_atelet(settings) as a:
        for uri in ("local:///../x", "local://h/x", "local:///"):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await a.stub.Checkpoint(pb.CheckpointRequest(
                    operation_id=op(), worker="default-0", actor=ACTOR,
                    scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "snapshot_uri" in (err.value.details() or "")
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await a.stub.Restore(pb.RestoreRequest(
                    operation_id=op(), worker="default-0", actor=ACTOR, spec=counter_spec(), snapshot_uri=uri))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "snapshot_uri" in (err.value.details() or "")
    assert tree(local_root_of(settings.state_dir)) == []


# ---- real runsc ------------------------------------------------------------------------------

@pytest.mark.runsc
@pytest.mark.asyncio
async def test_full_checkpoint_to_local_and_restore_from_it(atelet: Atelet, counter_image: str) -> None:
    run = await atelet.stub.Run(pb.RunRequest(operation_id=op(), worker="default-0", actor=ACTOR,
                                              spec=counter_spec(counter_image), probe_timeout_seconds=20))
    assert (await get(run.worker_ip)) == {"ip": run.worker_ip, "memory_count": 1, "file_count": 1}
    assert (await get(run.worker_ip)) == {"ip": run.worker_ip, "memory_count": 2, "file_count": 2}

    uri = "local:///actor/demo/c1/3"
    ckpt = await atelet.stub.Checkpoint(pb.CheckpointRequest(
        operation_id=op(), worker="default-0", actor=ACTOR, scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri))
    local = local_root_of(atelet.settings.state_dir)
    where = local / "actor" / "demo" / "c1" / "3"
    assert (where / "manifest.json").is_file()
    assert (where / "volumes" / "data.tar").is_file()
    on_disk = sorted(str(p.relative_to(where)) for p in where.rglob("*") if p.is_file())
    assert any(p.startswith("checkpoint/") for p in on_disk)
    assert sorted(f.path for f in ckpt.manifest.files) == [p for p in on_disk if p != "manifest.json"]
    for f in ckpt.manifest.files:
        assert hashlib.sha256((where / f.path).read_bytes()).hexdigest() == f.sha256
    assert tree(atelet.snapshot_root) == []  # nothing in the storage location
    assert tree(local) == ["actor", "actor/demo", "actor/demo/c1", "actor/demo/c1/3",
                          *(f"actor/demo/c1/3/{p}" for p in tree(where))]

    restored = await atelet.stub.Restore(pb.RestoreRequest(
        operation_id=op(), worker="default-1", actor=ACTOR, spec=counter_spec(counter_image),
        snapshot_uri=uri, manifest=ckpt.manifest, probe_timeout_seconds=20))
    assert restored.worker_ip != run.worker_ip
    assert (await get(restored.worker_ip)) == {"ip": restored.worker_ip, "memory_count": 3, "file_count": 3}
    assert (await get(restored.worker_ip))["memory_count"] == 4

    # Paused again into a new local generation, then restored with only the stored manifest.
    ckpt2 = await atelet.stub.Checkpoint(pb.CheckpointRequest(
        operation_id=op(), worker="default-1", actor=ACTOR, scope=pb.SNAPSHOT_SCOPE_FULL,
        snapshot_uri="local:///actor/demo/c1/4"))
    assert (local / "actor/demo/c1/4/manifest.json").is_file()
    again = await atelet.stub.Restore(pb.RestoreRequest(
        operation_id=op(), worker="default-0", actor=ACTOR, spec=counter_spec(counter_image),
        snapshot_uri="local:///actor/demo/c1/4", manifest=pb.SnapshotManifest(scope=ckpt2.manifest.scope),
        probe_timeout_seconds=20))
    assert (await get(again.worker_ip)) == {"ip": again.worker_ip, "memory_count": 5, "file_count": 5}

    for gen in ("3", "4"):
        assert (await atelet.stub.DeleteSnapshot(pb.DeleteSnapshotRequest(
            operation_id=op(), snapshot_uri=f"local:///actor/demo/c1/{gen}"))).existed
    assert local.is_dir() and tree(local) == []


def test_flag_and_refused_configuration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_args(["--local-snapshot-root", "/x/local"]).local_snapshot_root == Path("/x/local")
    with pytest.raises(SystemExit) as exit_:
        main(["--hollow", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--state-dir", str(tmp_path / "state"),
              "--snapshot-root", str(tmp_path / "local" / "snaps"), "--local-snapshot-root", str(tmp_path / "local")])
    assert exit_.value.code == 2
    assert "contains the snapshot root" in capsys.readouterr().err
    assert not (tmp_path / "state").exists()
