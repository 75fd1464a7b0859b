"""Snapshot URIs and image paths must stay inside the configured roots (no runsc needed)."""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest

from atelet.errors import AteletError
from atelet.images import ImageStore
from atelet.proto import atelet_pb2 as pb
from atelet.snapshots import SnapshotStore
from tests.atelet.conftest import COUNTER_IMAGE, REPO, counter_spec, make_settings, running_atelet

ACTOR = pb.ActorRef(atespace="demo", name="c1")


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    snaps = tmp_path / "snapshots"
    snaps.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (snaps / "escape").symlink_to(outside)
    return snaps, outside


@pytest.mark.parametrize("uri", [
    "s3://bucket/demo/c1/1",
    "file://otherhost/x",
    "file:relative/path",
    "{outside}/demo/1",
    "file://{outside}/demo/1",
    "file://{snaps}/../outside/demo/1",
    "file://{snaps}/demo/../../outside/1",
    "file://{snaps}/escape/demo/1",
    "file://{snaps}",
])
def test_snapshot_uri_outside_roots_is_invalid(roots: tuple[Path, Path], uri: str) -> None:
    snaps, outside = roots
    store = SnapshotStore([snaps])
    with pytest.raises(AteletError) as err:
        store.resolve(uri.format(snaps=snaps, outside=outside))
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "snapshot_uri" in err.value.reason


def test_snapshot_uri_inside_root_resolves(roots: tuple[Path, Path]) -> None:
    snaps, _ = roots
    assert SnapshotStore([snaps]).resolve(f"file://{snaps}/demo/c1/3") == snaps.resolve() / "demo/c1/3"


def test_image_path_outside_roots_is_invalid(tmp_path: Path) -> None:
    store = ImageStore([tmp_path], tmp_path / "cache")
    link = tmp_path / "link"
    link.symlink_to(REPO / "examples/counter")
    for ref in ("oci:../x:latest", f"oci:{REPO}/examples/counter/oci:latest", "oci:link/oci:latest",
                "docker.io/library/busybox:latest", "oci:nopath"):
        with pytest.raises(AteletError) as err:
            store.resolve(ref, "spec.containers[0].image")
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT, ref
        assert "spec.containers[0].image" in err.value.reason
    assert not (tmp_path / "cache").exists()


def test_image_resolves_relative_to_root() -> None:
    if not (REPO / "examples/counter/oci/index.json").exists():
        pytest.skip("examples/counter not built")
    layout, tag = ImageStore([REPO], Path("/nonexistent")).resolve(COUNTER_IMAGE)
    assert layout == REPO / "examples/counter/oci" and tag == "latest"


@pytest.mark.asyncio
async def test_grpc_refuses_paths_and_writes_nothing(tmp_path: Path, roots: tuple[Path, Path]) -> None:
    """Over gRPC (hollow mode: no sandbox is run, but every check is real)."""
    snaps, outside = roots
    settings = make_settings(tmp_path, hollow=True, snapshot_roots=[snaps])
    async with running_atelet(settings) as a:
        before = tree(snaps), tree(outside)
        bad_uris = [f"file://{outside}/a", f"file://{snaps}/../outside/a", f"file://{snaps}/escape/a", "http://x/a"]
        for uri in bad_uris:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await a.stub.Checkpoint(pb.CheckpointRequest(
                    operation_id=f"c-{uri}", worker="default-0", actor=ACTOR,
                    scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "snapshot_uri" in (err.value.details() or "")
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await a.stub.Restore(pb.RestoreRequest(
                    operation_id=f"r-{uri}", worker="default-0", actor=ACTOR,
                    spec=counter_spec(), snapshot_uri=uri))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await a.stub.Run(pb.RunRequest(operation_id="run-bad-image", worker="default-0", actor=ACTOR,
                                           spec=counter_spec("oci:/etc:latest")))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "spec.containers[0].image" in (err.value.details() or "")
        two = counter_spec()
        two.containers.append(two.containers[0])
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await a.stub.Run(pb.RunRequest(operation_id="run-two", worker="default-0", actor=ACTOR, spec=two))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "spec.containers" in (err.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await a.stub.Run(pb.RunRequest(operation_id="run-nowhere", worker="nope", actor=ACTOR,
                                           spec=counter_spec()))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert (tree(snaps), tree(outside)) == before
        assert not os.listdir(Path(settings.state_dir) / "operations")
