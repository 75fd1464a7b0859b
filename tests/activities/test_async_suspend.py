"""Async suspend and its background upload, on a real PostgreSQL.

From ARCHITECTURE.md ("Workflows"): SuspendActor mode async keeps the checkpoint on the node
(a LOCAL snapshot), returns SUSPENDED, uploads in the background, and pins the actor to that node
until uploaded. Expected consequences, worked out by hand: the actor's latest snapshot stays the
last uploaded one until the upload lands, then becomes the upload; a resume meanwhile restores
the local copy on its node; a failed resume returns the actor to SUSPENDED (not PAUSED); a
revert may drop a snapshot that was never uploaded.
"""

from __future__ import annotations

import pytest

from domain.refs import ActorRef
from domain.states import SnapshotStorage
from store import FailedPrecondition, NoCapacity, Store
from tests.activities.test_lifecycle import running_actor, suspend


async def async_suspend(store: Store, ref: ActorRef, op: str) -> int:
    plan = await store.suspends.begin(ref, op, "async")
    assert plan.snapshot is not None
    await store.suspends.complete(ref, op, plan.snapshot.snapshot_id, {"files": []}, 5)
    return plan.snapshot.snapshot_id


async def test_async_suspend_keeps_the_checkpoint_on_the_node_until_uploaded(two_nodes: Store) -> None:
    store = two_nodes
    ref = await running_actor(store)
    first = await suspend(store, ref, "s1")  # generation 1, uploaded
    await store.resumes.begin(ref, "r2")
    await store.resumes.finish(ref, "r2")
    node = (await store.actors.get(ref)).worker.node  # type: ignore[union-attr]

    plan = await store.suspends.begin(ref, "s2", "async")
    assert plan.worker is not None and plan.upload_from is None and plan.snapshot is not None
    assert (plan.snapshot.storage, plan.snapshot.node) == (SnapshotStorage.LOCAL, node)
    assert plan.snapshot.uri.startswith("local:///demo/actors/a1/2-")
    local = plan.snapshot.snapshot_id
    await store.suspends.complete(ref, "s2", local, {"files": []}, 5)
    await store.suspends.complete(ref, "s2", local, {"files": []}, 5)  # idempotent
    actor = await store.actors.get(ref)
    assert (actor.state, actor.worker, actor.pinned_node, actor.upload_pending) == ("SUSPENDED", None, node, True)
    assert actor.local_snapshot is not None and actor.local_snapshot.generation == 2
    assert actor.latest_snapshot is not None and actor.latest_snapshot.snapshot_id == first
    assert all(w.holders == [] for w in await store.nodes.list_workers())
    assert (await store.suspends.begin(ref, "s3", "async")).already_suspended

    upload = await store.uploads.begin(ref, "u1", local)
    assert upload.needed and upload.source is not None and upload.destination is not None
    assert upload.source.snapshot_id == local
    assert upload.atelet_address == ("127.0.0.1:1" if node == "n1" else "127.0.0.2:1")
    assert upload.destination.uri.startswith("file:///snap/demo/actors/a1/3-")
    assert upload.destination.storage == SnapshotStorage.EXTERNAL
    again = await store.uploads.begin(ref, "u1", local)  # a retried activity reuses its reservation
    assert again.destination is not None and again.destination.snapshot_id == upload.destination.snapshot_id

    assert await store.uploads.complete(ref, local, upload.destination.snapshot_id, {"files": []}, 5)
    assert await store.uploads.complete(ref, local, upload.destination.snapshot_id, {"files": []}, 5)  # repeat
    actor = await store.actors.get(ref)
    assert (actor.state, actor.pinned_node, actor.upload_pending, actor.local_snapshot) == (
        "SUSPENDED", None, False, None,
    )  # fmt: skip
    assert actor.latest_snapshot is not None and actor.latest_snapshot.generation == 3
    assert actor.latest_snapshot.state == "COMPLETED"
    assert local in {g.snapshot_id for g in await store.snapshots.garbage(100, 0.0)}  # the local copy goes
    assert not (await store.uploads.begin(ref, "u2", local)).needed


async def test_a_resume_before_the_upload_restores_the_local_copy_on_its_node(two_nodes: Store) -> None:
    store = two_nodes
    ref = await running_actor(store)
    node = (await store.actors.get(ref)).worker.node  # type: ignore[union-attr]
    local = await async_suspend(store, ref, "s1")
    upload = await store.uploads.begin(ref, "u1", local)  # the upload is under way...
    assert upload.destination is not None

    plan = await store.resumes.begin(ref, "r2")  # ...when a request comes
    assert plan.worker is not None and plan.worker.node == node
    assert plan.snapshot is not None and plan.snapshot.snapshot_id == local
    await store.resumes.rollback(ref, "r2", "restore failed: boom")
    actor = await store.actors.get(ref)
    assert (actor.state, actor.upload_pending, actor.pinned_node) == ("SUSPENDED", True, node)  # not PAUSED

    await store.resumes.begin(ref, "r3")
    await store.resumes.finish(ref, "r3")
    actor = await store.actors.get(ref)
    assert (actor.state, actor.upload_pending, actor.pinned_node) == ("RUNNING", False, None)
    # The upload lands after the actor moved on: it is not made the latest.
    assert not await store.uploads.complete(ref, local, upload.destination.snapshot_id, {"files": []}, 5)
    assert (await store.actors.get(ref)).latest_snapshot is None
    assert not (await store.uploads.begin(ref, "u2", local)).needed


async def test_a_pending_upload_on_a_dead_node_can_be_reverted(two_nodes: Store) -> None:
    store = two_nodes
    ref = await running_actor(store)
    first = await suspend(store, ref, "s1")
    await store.resumes.begin(ref, "r2")
    await store.resumes.finish(ref, "r2")
    node = (await store.actors.get(ref)).worker.node  # type: ignore[union-attr]
    local = await async_suspend(store, ref, "s2")
    async with store.pool.acquire() as connection:
        await connection.execute("UPDATE nodes SET last_heartbeat = now() - interval '1 minute' WHERE name = $1", node)
    assert await store.liveness.mark_lost() == [node]

    with pytest.raises(FailedPrecondition, match=rf"node {node} holding actor demo/a1's snapshot is not available"):
        await store.uploads.begin(ref, "u1", local)
    with pytest.raises(NoCapacity) as refused:
        await store.resumes.begin(ref, "r3")
    assert refused.value.message.startswith(
        f"actor demo/a1 is SUSPENDED and its snapshot (not uploaded yet) lies on node {node}, which is not available"
    )
    assert "go back to its last uploaded snapshot (generation 1)" in refused.value.message

    plan = await store.reverts.begin(ref, "v1")
    assert (plan.from_state, plan.worker) == ("SUSPENDED", None)
    await store.reverts.finish(ref, "v1", "reverted from SUSPENDED")
    actor = await store.actors.get(ref)
    assert (actor.state, actor.upload_pending, actor.pinned_node) == ("SUSPENDED", False, None)
    assert actor.latest_snapshot is not None and actor.latest_snapshot.snapshot_id == first
    with pytest.raises(FailedPrecondition, match=r"is not in a revertable state \(state: SUSPENDED\)"):
        await store.reverts.begin(ref, "v2")  # nothing left to drop: refused as before
