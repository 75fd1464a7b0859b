"""PAUSED: the pause, resume, suspend (upload) and revert transitions on a real PostgreSQL.

Expected values come from ARCHITECTURE.md's state table and placement rules:
RUNNING --Pause--> PAUSING --local checkpoint--> PAUSED; PAUSED --Resume--> RESUMING pinned to
the snapshot's node; PAUSED --Suspend--> SUSPENDING (uploads the local snapshot); PAUSED
--Revert--> SUSPENDED with the last COMPLETED snapshot; placement check (3) keeps a paused
actor on the node of its local snapshot, and a full pinned node with room elsewhere means
"upload, unpin, place elsewhere". The fixture has two nodes with one one-place worker each.
"""

from __future__ import annotations

import pytest

from domain.refs import ActorRef
from domain.states import SnapshotStorage
from store import FailedPrecondition, NoCapacity, NotFound, PinnedNodeFull, Store
from tests.activities.test_lifecycle import running_actor, suspend


async def pause(store: Store, ref: ActorRef, op: str) -> int:
    plan = await store.pauses.begin(ref, op)
    assert plan.snapshot is not None
    await store.pauses.complete(ref, op, plan.snapshot.snapshot_id, {"files": [], "scope": "FULL"}, 7)
    return plan.snapshot.snapshot_id


async def snapshot_row(store: Store, snapshot_id: int) -> dict[str, object]:
    row = await store.pool.fetchrow(
        "SELECT storage, state, node, uri, generation FROM snapshots WHERE id = $1", snapshot_id
    )
    return dict(row) if row is not None else {}


async def test_pause_keeps_the_checkpoint_on_the_node_and_frees_the_worker(two_nodes: Store) -> None:
    store = two_nodes
    ref = await running_actor(store)
    first = await suspend(store, ref, "s1")  # generation 1, in the storage location
    await store.resumes.begin(ref, "r2")
    await store.resumes.finish(ref, "r2")
    node = (await store.actors.get(ref)).worker.node  # type: ignore[union-attr]

    plan = await store.pauses.begin(ref, "p1")
    assert plan.worker is not None and plan.worker.node == node and plan.snapshot is not None
    assert plan.snapshot.uri.startswith("local:///demo/actors/a1/2-")
    assert (plan.snapshot.storage, plan.snapshot.node) == (SnapshotStorage.LOCAL, node)
    assert (await store.actors.get(ref)).state == "PAUSING"
    again = await store.pauses.begin(ref, "p1")  # a retried activity finds its own reservation
    assert again.snapshot is not None and again.snapshot.snapshot_id == plan.snapshot.snapshot_id
    with pytest.raises(FailedPrecondition, match=r"cannot be suspended from state PAUSING"):
        await store.suspends.begin(ref, "other")

    await store.pauses.complete(ref, "p1", plan.snapshot.snapshot_id, {"files": []}, 7)
    await store.pauses.complete(ref, "p1", plan.snapshot.snapshot_id, {"files": []}, 7)  # idempotent
    actor = await store.actors.get(ref)
    assert (actor.state, actor.worker, actor.pinned_node) == ("PAUSED", None, node)
    assert actor.local_snapshot is not None and actor.local_snapshot.generation == 2
    assert actor.latest_snapshot is not None and actor.latest_snapshot.snapshot_id == first  # revert target
    assert await snapshot_row(store, plan.snapshot.snapshot_id) == {
        "storage": "LOCAL", "state": "COMPLETED", "node": node, "uri": plan.snapshot.uri, "generation": 2,
    }  # fmt: skip
    assert all(w.holders == [] for w in await store.nodes.list_workers())  # the place is free
    assert (await store.pauses.begin(ref, "p2")).already_paused
    history = await store.history.of_actor(ref)
    assert (history[0].operation, history[0].outcome) == ("PauseActor", "ok")


async def test_pause_is_refused_outside_running(two_nodes: Store) -> None:
    ref = ActorRef("demo", "a1")
    await two_nodes.actors.create(ref, "counter", {})
    with pytest.raises(FailedPrecondition) as refused:
        await two_nodes.pauses.begin(ref, "p1")
    assert refused.value.message == "actor demo/a1 cannot be paused from state SUSPENDED (PauseActor wants RUNNING or FROZEN)"
    assert refused.value.details == {"state": "SUSPENDED"}
    with pytest.raises(NotFound, match="actor demo/nope not found"):
        await two_nodes.pauses.begin(ActorRef("demo", "nope"), "p1")
    assert (await two_nodes.actors.get(ref)).state == "SUSPENDED"  # nothing changed


async def test_failed_pause_returns_to_running_and_drops_the_reservation(two_nodes: Store) -> None:
    ref = await running_actor(two_nodes)
    plan = await two_nodes.pauses.begin(ref, "p1")
    assert plan.snapshot is not None
    await two_nodes.suspends.rollback(ref, "p1", plan.snapshot.snapshot_id, "checkpoint failed: boom")
    actor = await two_nodes.actors.get(ref)
    assert (actor.state, actor.pinned_node, actor.local_snapshot, actor.last_error) == (
        "RUNNING", None, None, "checkpoint failed: boom",
    )  # fmt: skip
    assert actor.worker is not None  # the sandbox still runs there
    assert await snapshot_row(two_nodes, plan.snapshot.snapshot_id) == {}


async def test_resume_of_a_paused_actor_is_pinned_to_its_node_and_consumes_the_local_snapshot(two_nodes: Store) -> None:
    store = two_nodes
    ref = await running_actor(store)
    for cycle in range(6):  # random choice of two: the pin must hold every time
        node = (await store.actors.get(ref)).worker.node  # type: ignore[union-attr]
        local = await pause(store, ref, f"p{cycle}")
        plan = await store.resumes.begin(ref, f"r{cycle}")
        assert plan.worker is not None and plan.worker.node == node
        assert plan.snapshot is not None and plan.snapshot.snapshot_id == local
        assert plan.snapshot.uri.startswith("local:///")
        await store.resumes.finish(ref, f"r{cycle}")
        actor = await store.actors.get(ref)
        assert (actor.state, actor.pinned_node, actor.local_snapshot) == ("RUNNING", None, None)
        garbage = {g.snapshot_id: g for g in await store.snapshots.garbage(100, 0.0)}
        assert garbage[local].storage == SnapshotStorage.LOCAL and garbage[local].node == node


async def test_failed_resume_of_a_paused_actor_goes_back_to_paused(two_nodes: Store) -> None:
    ref = await running_actor(two_nodes)
    local = await pause(two_nodes, ref, "p1")
    await two_nodes.resumes.begin(ref, "r2")
    await two_nodes.resumes.rollback(ref, "r2", "restore failed: boom")
    actor = await two_nodes.actors.get(ref)
    assert (actor.state, actor.worker) == ("PAUSED", None)
    assert actor.local_snapshot is not None and actor.local_snapshot.snapshot_id == local
    assert all(local != g.snapshot_id for g in await two_nodes.snapshots.garbage(100, 0.0))  # still needed


async def test_suspend_of_a_paused_actor_uploads_its_local_snapshot(two_nodes: Store) -> None:
    store = two_nodes
    ref = await running_actor(store)
    node = (await store.actors.get(ref)).worker.node  # type: ignore[union-attr]
    local = await pause(store, ref, "p1")  # generation 1, LOCAL

    plan = await store.suspends.begin(ref, "s1")
    assert plan.worker is None and plan.upload_from is not None and plan.upload_from.snapshot_id == local
    assert plan.atelet_address == ("127.0.0.1:1" if node == "n1" else "127.0.0.2:1")
    assert plan.snapshot is not None and plan.snapshot.uri.startswith("file:///snap/demo/actors/a1/2-")
    assert plan.snapshot.storage == SnapshotStorage.EXTERNAL
    again = await store.suspends.begin(ref, "s1")
    assert again.upload_from is not None and again.snapshot is not None
    assert (again.upload_from.snapshot_id, again.snapshot.snapshot_id) == (local, plan.snapshot.snapshot_id)

    await store.suspends.complete(ref, "s1", plan.snapshot.snapshot_id, {"files": []}, 7)
    actor = await store.actors.get(ref)
    assert (actor.state, actor.pinned_node, actor.local_snapshot) == ("SUSPENDED", None, None)
    assert actor.latest_snapshot is not None and actor.latest_snapshot.generation == 2
    assert actor.latest_snapshot.state == "COMPLETED"
    assert local in {g.snapshot_id for g in await store.snapshots.garbage(100, 0.0)}


async def test_failed_upload_leaves_the_actor_paused(two_nodes: Store) -> None:
    ref = await running_actor(two_nodes)
    local = await pause(two_nodes, ref, "p1")
    plan = await two_nodes.suspends.begin(ref, "s1")
    assert plan.snapshot is not None
    await two_nodes.suspends.rollback(ref, "s1", plan.snapshot.snapshot_id, "copy failed: disk full")
    actor = await two_nodes.actors.get(ref)
    assert (actor.state, actor.last_error) == ("PAUSED", "copy failed: disk full")
    assert actor.local_snapshot is not None and actor.local_snapshot.snapshot_id == local
    assert await snapshot_row(two_nodes, plan.snapshot.snapshot_id) == {}


async def test_pinned_node_full_with_room_elsewhere_asks_for_a_detach(two_nodes: Store) -> None:
    store = two_nodes
    ref = await running_actor(store)
    node = (await store.actors.get(ref)).worker.node  # type: ignore[union-attr]
    await pause(store, ref, "p1")
    async with store.pool.acquire() as connection:  # only our node takes actors for a moment
        await connection.execute("UPDATE workers SET state = 'UNAVAILABLE' WHERE node <> $1", node)
    squatter = await running_actor(store, "a2", "r-a2")
    async with store.pool.acquire() as connection:
        await connection.execute("UPDATE workers SET state = 'ACTIVE'")
    assert (await store.actors.get(squatter)).worker.node == node  # type: ignore[union-attr]

    with pytest.raises(PinnedNodeFull) as full:
        await store.resumes.begin(ref, "r2")
    # two workers, one per node: the other node's is removed by check 3, ours is busy
    assert full.value.message.startswith(
        f"no worker has room for the actor demo/a1: 2 workers: 1 not on node {node} (it holds the actor's local "
        "snapshot), 1 busy (a worker hosts one actor); other nodes have room"
    )
    assert (await store.actors.get(ref)).state == "PAUSED"  # refused: nothing changed

    other = await running_actor(store, "a3", "r-a3")  # now the other node is full too
    assert (await store.actors.get(other)).worker.node != node  # type: ignore[union-attr]
    with pytest.raises(NoCapacity) as no_room:
        await store.resumes.begin(ref, "r3")
    assert not isinstance(no_room.value, PinnedNodeFull)
    # checks in order: the other node's worker (busy too now) is removed by check 3 first
    assert no_room.value.message == (
        f"no worker has room for the actor demo/a1: 2 workers: 1 not on node {node} (it holds the actor's local "
        "snapshot), 1 busy (a worker hosts one actor)"
    )


async def test_paused_actor_on_a_dead_node_says_how_to_get_out(two_nodes: Store) -> None:
    store = two_nodes
    ref = await running_actor(store)
    first = await suspend(store, ref, "s1")
    await store.resumes.begin(ref, "r2")
    await store.resumes.finish(ref, "r2")
    node = (await store.actors.get(ref)).worker.node  # type: ignore[union-attr]
    await pause(store, ref, "p1")
    async with store.pool.acquire() as connection:
        await connection.execute("UPDATE nodes SET last_heartbeat = now() - interval '1 minute' WHERE name = $1", node)
    assert await store.liveness.mark_lost() == [node]  # the API's sweeper: its workers become UNAVAILABLE

    with pytest.raises(NoCapacity) as refused:
        await store.resumes.begin(ref, "r3")
    assert not isinstance(refused.value, PinnedNodeFull)
    assert refused.value.message == (
        f"actor demo/a1 is PAUSED and its paused state lies on node {node}, which is not available (no heartbeat "
        "for 60 s); resume it when the node is back, or drop the paused state and go back to its last uploaded "
        "snapshot (generation 1) with 'ate revert actor a1 -a demo'"
    )
    with pytest.raises(FailedPrecondition, match=rf"is PAUSED on node {node}, which is not available"):
        await store.suspends.begin(ref, "s2")
    assert (await store.actors.get(ref)).state == "PAUSED"  # both refused: nothing changed

    plan = await store.reverts.begin(ref, "v1")  # the way out needs no node
    assert (plan.from_state, plan.worker) == ("PAUSED", None)
    await store.reverts.finish(ref, "v1", "reverted from PAUSED")
    actor = await store.actors.get(ref)
    assert (actor.state, actor.pinned_node, actor.local_snapshot) == ("SUSPENDED", None, None)
    assert actor.latest_snapshot is not None and actor.latest_snapshot.snapshot_id == first


async def test_drain_uploads_paused_actors_and_crashes_them_at_the_deadline(two_nodes: Store) -> None:
    from datetime import UTC, datetime, timedelta

    store = two_nodes
    ref = await running_actor(store)
    node = (await store.actors.get(ref)).worker.node  # type: ignore[union-attr]
    await pause(store, ref, "p1")
    plan = await store.drains.begin(node, datetime.now(UTC) + timedelta(minutes=5))
    assert plan.running == [ref]  # a suspend will upload its snapshot
    assert await store.drains.leftovers(node) == [(ref, None)]

    await store.drains.crash_after_deadline(ref, None, "eviction deadline passed", node)
    actor = await store.actors.get(ref)
    assert (actor.state, actor.pinned_node, actor.local_snapshot, actor.last_error) == (
        "CRASHED", None, None, "eviction deadline passed",
    )  # fmt: skip
    assert await store.drains.leftovers(node) == []
