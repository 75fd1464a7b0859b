"""The atelet activities reach the node the store names over mutual TLS, and refuse an atelet
whose certificate is another node's: snapshot deletion through "any live atelet" (the store
answers its node and address), on a real store and a real hollow atelet."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import grpc
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.atelet import AteletActivities
from activities.atelet_channels import connect_failed
from atelet.settings import AteletSettings
from domain.operations.atelet_calls import AteletCheckpointInput
from domain.operations.snapshot_gc import DeleteSnapshotInput, GarbageSnapshot
from domain.refs import ActorRef, SnapshotRef, WorkerRef
from domain.states import SnapshotScope
from store import Store
from tests.activities.test_store import worker
from tests.atelet.conftest import make_settings, running_atelet
from tests.tls import control_plane_tls


def garbage(root: Path) -> DeleteSnapshotInput:
    return DeleteSnapshotInput(
        GarbageSnapshot(snapshot_id=987654, uri=f"file://{root}/demo/c1/1", owner="demo/c1", generation=1)
    )


async def test_any_live_atelet_is_called_as_the_node_the_store_names(store: Store, tmp_path: Path) -> None:
    settings = make_settings(tmp_path, hollow=True)
    await store.nodes.register(settings.node, settings.listen, "v", [worker("w1")])
    assert await store.nodes.any_live_atelet() == (settings.node, settings.listen)
    activities = AteletActivities(store, tls=control_plane_tls())
    try:
        async with running_atelet(settings):
            existed = await activities.delete_snapshot(garbage(Path(settings.snapshot_roots[0]).resolve()))
    finally:
        await activities.close()
    assert existed is False  # nothing was there: the call reached the atelet and it answered


async def test_an_address_now_held_by_another_nodes_atelet_is_refused(store: Store, tmp_path: Path) -> None:
    settings = make_settings(tmp_path, hollow=True)
    await store.nodes.register("gone-node", settings.listen, "v", [worker("w1")])  # its address, reused
    activities = AteletActivities(store, tls=control_plane_tls(), call_timeout_seconds=10)
    try:
        async with running_atelet(settings):
            with pytest.raises(ApplicationError) as caught:
                await activities.delete_snapshot(garbage(Path(settings.snapshot_roots[0]).resolve()))
    finally:
        await activities.close()
    assert caught.value.type == "AteletUnavailable"
    assert "Hostname Verification Check failed" in caught.value.message


def checkpoint_input(settings: AteletSettings) -> AteletCheckpointInput:
    return AteletCheckpointInput(
        operation_id="suspend-1",
        worker=WorkerRef(worker_id=1, pool="default", name="default-0", node=settings.node, ip="10.0.0.2",
                         atelet_address=settings.listen),
        holder=ActorRef("demo", "c1"),
        snapshot=SnapshotRef(snapshot_id=1, generation=1, scope=SnapshotScope.FULL,
                             uri=f"file://{Path(settings.snapshot_roots[0]).resolve()}/demo/c1/1"),
    )


async def test_a_checkpoint_waits_for_an_atelet_that_is_restarting(tmp_path: Path) -> None:
    # The atelet answers only 3 s after the call began (a restart): the call reaches it then,
    # instead of failing at once (the sandbox may have finished its save alone meanwhile, and only
    # this call stores it). This atelet runs nothing, so its answer is a refusal naming the worker.
    settings = make_settings(tmp_path, hollow=True)
    activities = AteletActivities(None, tls=control_plane_tls(), call_timeout_seconds=10)

    async def restarted_later() -> None:
        await asyncio.sleep(3)
        async with running_atelet(settings):
            await asyncio.sleep(10)

    atelet = asyncio.create_task(restarted_later())
    started = time.monotonic()
    try:
        with pytest.raises(ApplicationError) as caught:
            await ActivityEnvironment().run(activities.checkpoint, checkpoint_input(settings))
    finally:
        atelet.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await atelet
        await activities.close()
    assert time.monotonic() - started >= 3
    assert caught.value.type == "AteletFailedPrecondition"
    assert "worker default-0 runs nothing" in caught.value.message


async def test_a_checkpoint_gives_up_on_an_atelet_that_stays_down(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("activities.atelet.CHECKPOINT_REACH_SECONDS", 2.0)
    settings = make_settings(tmp_path, hollow=True)  # never started
    activities = AteletActivities(None, tls=control_plane_tls(), call_timeout_seconds=10)
    started = time.monotonic()
    try:
        with pytest.raises(ApplicationError) as caught:
            await ActivityEnvironment().run(activities.checkpoint, checkpoint_input(settings))
    finally:
        await activities.close()
    assert time.monotonic() - started >= 2
    assert caught.value.type == "AteletUnavailable"
    assert caught.value.message == (
        f"the atelet at {settings.listen} did not answer the Checkpoint call (Connection refused): the node's agent "
        "is down or restarting"
    )


async def test_an_unreachable_atelet_is_told_from_one_that_answers_unavailable_by_the_channel_state() -> None:
    # The decision reads the channel's connectivity, not the error's text: both fail UNAVAILABLE.
    def refuse(_request: bytes, context: grpc.ServicerContext) -> bytes:
        context.abort(grpc.StatusCode.UNAVAILABLE, "failed to connect to the sandbox")  # text that once misled

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("t.T", {"Call": grpc.unary_unary_rpc_method_handler(refuse)})]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    answering = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        with pytest.raises(grpc.aio.AioRpcError) as answered:
            await answering.unary_unary("/t.T/Call")(b"", timeout=10)
        assert answered.value.code() == grpc.StatusCode.UNAVAILABLE
        assert not connect_failed(answered.value, answering)
        await server.stop(None)
        with pytest.raises(grpc.aio.AioRpcError) as unanswered:
            await answering.unary_unary("/t.T/Call")(b"", timeout=10)
        assert unanswered.value.code() == grpc.StatusCode.UNAVAILABLE
        assert connect_failed(unanswered.value, answering)
    finally:
        await answering.close()
        await server.stop(None)
