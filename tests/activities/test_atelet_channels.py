"""The atelet activities reach the node the store names over mutual TLS, and refuse an atelet
whose certificate is another node's: snapshot deletion through "any live atelet" (the store
answers its node and address), on a real store and a real hollow atelet."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from activities.atelet import AteletActivities
from activities.store import Store
from domain.operations.snapshot_gc import DeleteSnapshotInput, GarbageSnapshot
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
