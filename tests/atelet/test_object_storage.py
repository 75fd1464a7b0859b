"""Snapshots in object storage, on a real S3 server (SeaweedFS) with real runsc and gRPC.

Two atelets with separate state dirs, caches and snapshot roots share nothing but the store.
Counts come from examples/counter: +1 in memory and +1 in the durable dir per request; a FULL
snapshot keeps both.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import obstore
import pytest
from obstore.store import from_url

from ate.dev.object_store import LocalObjectStore
from atelet.proto import atelet_pb2 as pb
from tests.atelet.conftest import (
    Atelet,
    assert_nothing_left,
    checkpoint_compression,
    counter_spec,
    force_cleanup,
    make_settings,
)
from tests.atelet.conftest import running_atelet as running

pytestmark = [pytest.mark.runsc, pytest.mark.asyncio]
ACTOR = pb.ActorRef(atespace="demo", name="c1")


def op() -> str:
    return f"op-{uuid.uuid4().hex[:12]}"


async def get(ip: str) -> dict[str, int]:
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.get(f"http://{ip}:8080/", headers={"Connection": "close"})
        response.raise_for_status()
        return {k: v for k, v in response.json().items() if k != "ip"}


@pytest.fixture
async def nodes(short_tmp: Path, object_store: LocalObjectStore) -> AsyncIterator[tuple[Atelet, Atelet, str]]:
    """Two atelets allowed into s3://ate/<run>/ and a fresh location there for this test."""
    run = uuid.uuid4().hex[:8]
    location = f"s3://{object_store.bucket}/{run}"
    settings = [
        make_settings(short_tmp / name, object_store_locations=[location], object_store_retry_seconds=2)
        for name in ("a", "b")
    ]
    try:
        async with running(settings[0]) as a, running(settings[1]) as b:
            yield a, b, location
        for s in settings:
            assert_nothing_left(s)
    finally:
        for s in settings:
            force_cleanup(s)


async def objects_under(location: str) -> dict[str, int]:
    scheme_bucket, _, prefix = location.partition("://")[2].partition("/")
    store = from_url(f"s3://{scheme_bucket}")
    found: dict[str, int] = {}
    async for batch in obstore.list(store, prefix=prefix + "/"):
        for meta in batch:
            found[meta["path"].removeprefix(prefix + "/")] = meta["size"]
    return found


async def run_counter(a: Atelet, worker: str, image: str) -> str:
    run = await a.stub.Run(pb.RunRequest(operation_id=op(), worker=worker, actor=ACTOR, spec=counter_spec(image),
                                         probe_timeout_seconds=20))
    return run.worker_ip


async def checkpoint(a: Atelet, worker: str, uri: str) -> pb.CheckpointResponse:
    return await a.stub.Checkpoint(pb.CheckpointRequest(operation_id=op(), worker=worker, actor=ACTOR,
                                                        scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri))


def restore_request(uri: str, manifest: pb.SnapshotManifest, image: str, worker: str = "default-0") -> pb.RestoreRequest:
    return pb.RestoreRequest(operation_id=op(), worker=worker, actor=ACTOR, spec=counter_spec(image),
                             snapshot_uri=uri, manifest=manifest, probe_timeout_seconds=20)


async def idle(a: Atelet) -> bool:
    health = await a.stub.Health(pb.HealthRequest())
    return all(w.sandbox_state == "idle" for w in health.workers)


async def terminate(a: Atelet, worker: str = "default-0") -> None:
    await a.stub.Terminate(pb.TerminateRequest(operation_id=op(), worker=worker, actor=ACTOR))


async def test_a_snapshot_in_s3_resumes_on_another_node_and_then_from_the_cache(
        nodes: tuple[Atelet, Atelet, str], counter_image: str) -> None:
    a, b, location = nodes
    ip = await run_counter(a, "default-0", counter_image)
    assert await get(ip) == {"memory_count": 1, "file_count": 1}
    assert await get(ip) == {"memory_count": 2, "file_count": 2}
    uri = f"{location}/demo/actors/c1/1-{uuid.uuid4().hex[:12]}"
    done = await checkpoint(a, "default-0", uri)
    assert await idle(a)  # the sandbox stopped once its snapshot was stored

    stored = await objects_under(uri)
    assert stored == {**{f.path: f.size_bytes for f in done.manifest.files}, "manifest.json": stored["manifest.json"]}
    manifest_object = json.loads(bytes(await (await obstore.get_async(
        from_url("s3://ate"), uri.removeprefix("s3://ate/") + "/manifest.json")).bytes_async()))
    assert {f["path"] for f in manifest_object["files"]} == {f.path for f in done.manifest.files}
    # bound for object storage: compressed (atelet --checkpoint-compression auto)
    state_file = bytes(await (await obstore.get_async(
        from_url("s3://ate"), uri.removeprefix("s3://ate/") + "/checkpoint/checkpoint.img")).bytes_async())
    assert checkpoint_compression(state_file) == "flate-best-speed"

    # node b has never seen it: a download, checked file by file, then a restore with memory kept
    restored = await b.stub.Restore(restore_request(uri, done.manifest, counter_image))
    assert not restored.snapshot_cache_hit
    assert await get(restored.worker_ip) == {"memory_count": 3, "file_count": 3}

    uri2 = f"{location}/demo/actors/c1/2-{uuid.uuid4().hex[:12]}"
    done2 = await checkpoint(b, "default-0", uri2)
    # the same node resumes it again: its checkpoint left it in the cache, nothing is downloaded
    again = await b.stub.Restore(restore_request(uri2, done2.manifest, counter_image, "default-1"))
    assert again.snapshot_cache_hit
    assert await get(again.worker_ip) == {"memory_count": 4, "file_count": 4}
    await terminate(b, "default-1")

    # deleting it removes every object (and its cache entry)
    deleted = await b.stub.DeleteSnapshot(pb.DeleteSnapshotRequest(operation_id=op(), snapshot_uri=uri2))
    assert deleted.existed and await objects_under(uri2) == {}


async def test_a_corrupted_or_incomplete_snapshot_is_never_restored(
        nodes: tuple[Atelet, Atelet, str], counter_image: str) -> None:
    a, b, location = nodes
    ip = await run_counter(a, "default-0", counter_image)
    await get(ip)
    uri = f"{location}/demo/actors/c1/1-{uuid.uuid4().hex[:12]}"
    done = await checkpoint(a, "default-0", uri)
    store = from_url("s3://ate")
    key = uri.removeprefix("s3://ate/")
    largest = max(done.manifest.files, key=lambda f: f.size_bytes)
    original = bytes(await (await obstore.get_async(store, f"{key}/{largest.path}")).bytes_async())
    flipped = bytes([original[0] ^ 0xFF]) + original[1:]
    await obstore.put_async(store, f"{key}/{largest.path}", flipped)

    with pytest.raises(grpc.aio.AioRpcError) as err:
        await b.stub.Restore(restore_request(uri, done.manifest, counter_image))
    assert err.value.code() == grpc.StatusCode.DATA_LOSS
    assert f"snapshot file {largest.path} at {uri}: sha256" in (err.value.details() or "")
    assert "the snapshot is corrupted" in (err.value.details() or "")
    assert await idle(b)

    await obstore.put_async(store, f"{key}/{largest.path}", original)
    await obstore.delete_async(store, f"{key}/manifest.json")  # as if the upload died before its manifest
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await b.stub.Restore(restore_request(uri, pb.SnapshotManifest(scope=pb.SNAPSHOT_SCOPE_FULL), counter_image))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "no completed snapshot" in (err.value.details() or "")
    assert await idle(b)
    # with the right manifest and intact files it restores (the check is what refused, nothing else)
    good = await b.stub.Restore(restore_request(uri, done.manifest, counter_image))
    assert await get(good.worker_ip) == {"memory_count": 2, "file_count": 2}
    await terminate(b)


async def armed(failpoints: Path, name: str) -> Path:
    (failpoints / name).write_text("armed")
    return failpoints / f"{name}.reached"


async def reached(path: Path) -> None:
    for _ in range(600):
        if path.exists():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path.name} not reached")


async def test_the_store_dying_during_an_upload_leaves_the_actor_running(
        nodes: tuple[Atelet, Atelet, str], counter_image: str, object_store: LocalObjectStore,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, _, location = nodes
    monkeypatch.setenv("ATE_FAILPOINTS_DIR", str(tmp_path))
    ip = await run_counter(a, "default-0", counter_image)
    assert await get(ip) == {"memory_count": 1, "file_count": 1}
    uri = f"{location}/demo/actors/c1/1-{uuid.uuid4().hex[:12]}"
    point = await armed(tmp_path, "Atelet.checkpoint.before_upload")
    attempt = asyncio.ensure_future(checkpoint(a, "default-0", uri))
    try:
        await reached(point)
        object_store.kill()
        (tmp_path / "Atelet.checkpoint.before_upload").unlink()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await attempt
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "snapshot store s3://ate failed while uploading" in (err.value.details() or "")
        # nothing was promoted, and the sandbox runs on with its memory
        assert await get(ip) == {"memory_count": 2, "file_count": 2}
    finally:
        if object_store.process is None:
            object_store.start()
    assert "manifest.json" not in await objects_under(uri)
    done = await checkpoint(a, "default-0", uri.replace("/1-", "/2-"))  # the next attempt works
    assert done.manifest.files


async def test_the_store_dying_during_a_download_fails_the_restore_cleanly(
        nodes: tuple[Atelet, Atelet, str], counter_image: str, object_store: LocalObjectStore,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, location = nodes
    ip = await run_counter(a, "default-0", counter_image)
    await get(ip)
    uri = f"{location}/demo/actors/c1/1-{uuid.uuid4().hex[:12]}"
    done = await checkpoint(a, "default-0", uri)
    monkeypatch.setenv("ATE_FAILPOINTS_DIR", str(tmp_path))
    point = await armed(tmp_path, "Atelet.restore.before_download")
    attempt = asyncio.ensure_future(b.stub.Restore(restore_request(uri, done.manifest, counter_image)))
    try:
        await reached(point)
        object_store.kill()
        (tmp_path / "Atelet.restore.before_download").unlink()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await attempt
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "snapshot store s3://ate failed while downloading" in (err.value.details() or "")
        assert await idle(b)
    finally:
        if object_store.process is None:
            object_store.start()
    restored = await b.stub.Restore(restore_request(uri, done.manifest, counter_image))  # the next one works
    assert not restored.snapshot_cache_hit  # the failed download left nothing in the cache
    assert await get(restored.worker_ip) == {"memory_count": 2, "file_count": 2}
    await terminate(b)


async def test_concurrent_restores_of_one_snapshot_download_it_once(
        nodes: tuple[Atelet, Atelet, str], counter_image: str) -> None:
    a, b, location = nodes
    ip = await run_counter(a, "default-0", counter_image)
    assert await get(ip) == {"memory_count": 1, "file_count": 1}
    uri = f"{location}/demo/actors/c1/1-{uuid.uuid4().hex[:12]}"
    done = await checkpoint(a, "default-0", uri)
    # two actors restored from the same snapshot at once on node b (a tag's use): one download
    first, second = pb.ActorRef(atespace="demo", name="x1"), pb.ActorRef(atespace="demo", name="x2")
    requests = []
    for worker, ref in (("default-0", first), ("default-1", second)):
        request = restore_request(uri, done.manifest, counter_image, worker)
        request.actor.CopyFrom(ref)
        requests.append(request)
    replies = await asyncio.gather(*(b.stub.Restore(r) for r in requests))
    assert sorted(r.snapshot_cache_hit for r in replies) == [False, True]
    for reply in replies:  # two independent copies, each from the snapshot's count
        assert await get(reply.worker_ip) == {"memory_count": 2, "file_count": 2}
    for worker, ref in (("default-0", first), ("default-1", second)):
        await b.stub.Terminate(pb.TerminateRequest(operation_id=op(), worker=worker, actor=ref))


async def test_a_store_that_refuses_the_credentials_is_named_and_not_retried(
        object_store: LocalObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from atelet.errors import AteletError
    from atelet.snapshots.manifest import hash_into
    from atelet.snapshots.remote import ObjectStores

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    stores = ObjectStores(["s3://ate/denied"], retry_seconds=30)
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "pages.img").write_bytes(b"x" * 1000)
    manifest = pb.SnapshotManifest(scope=pb.SNAPSHOT_SCOPE_FULL)
    hash_into(tmp_path, manifest)
    started = asyncio.get_running_loop().time()
    with pytest.raises(AteletError) as err:
        await stores.upload(tmp_path, stores.location("s3://ate/denied/x/1", "snapshot_uri"), manifest)
    assert err.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert err.value.reason.startswith("snapshot store s3://ate refused this node's credentials while uploading")
    assert asyncio.get_running_loop().time() - started < 30  # refused at once, not retried for the window
    with pytest.raises(AteletError) as outside:
        stores.location("s3://ate/elsewhere/x/1", "snapshot_uri")
    assert outside.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "outside the object storage locations of this node (['s3://ate/denied'])" in outside.value.reason


async def test_a_save_to_s3_whose_call_was_cancelled_is_completed_by_its_retry(
        nodes: tuple[Atelet, Atelet, str], counter_image: str) -> None:
    # The object-storage path keeps the sandbox frozen while it is saved and uploaded. A call
    # cancelled in the middle of the save (a deadline, an atelet restart on the caller's side)
    # leaves the save running; its retry with the same operation uploads it, stops the frozen
    # sandbox and frees the worker, and the actor resumes elsewhere with its memory.
    a, b, location = nodes
    spec = counter_spec(counter_image)
    spec.containers[0].env["BALLAST_MB"] = "120"  # a save of about a second (compressed on its way to S3)
    spec.memory_bytes = 1024 * 2**20
    run = await a.stub.Run(pb.RunRequest(operation_id=op(), worker="default-0", actor=ACTOR, spec=spec,
                                         probe_timeout_seconds=60))
    assert [await get(run.worker_ip) for _ in range(2)] == [{"memory_count": 1, "file_count": 1},
                                                           {"memory_count": 2, "file_count": 2}]
    uri = f"{location}/demo/actors/c1/1-{uuid.uuid4().hex[:12]}"
    request = pb.CheckpointRequest(operation_id=op(), worker="default-0", actor=ACTOR,
                                   scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri)
    journal = Path(a.settings.state_dir).resolve() / "workers" / "default-0" / "checkpoint"
    first = asyncio.ensure_future(a.stub.Checkpoint(request))
    for _ in range(6000):
        if (journal / "pid").exists():
            break
        await asyncio.sleep(0.01)
    assert (journal / "pid").exists(), "the save never started"
    assert not (journal / "status").exists(), "the save ended before the test could cancel its call"
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    saved = await a.stub.Checkpoint(request)
    assert saved.manifest.created_by_operation == request.operation_id
    assert await idle(a)  # the frozen sandbox was stopped once the snapshot was stored
    assert "manifest.json" in await objects_under(uri)
    restored = await b.stub.Restore(pb.RestoreRequest(
        operation_id=op(), worker="default-0", actor=ACTOR, spec=spec, snapshot_uri=uri, manifest=saved.manifest,
        probe_timeout_seconds=60))
    assert await get(restored.worker_ip) == {"memory_count": 3, "file_count": 3}
    await terminate(b)
