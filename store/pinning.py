"""Actors pinned to a node by a LOCAL snapshot (a pause, or an async suspend not uploaded yet):
why the node cannot take the actor back, the atelet that holds the snapshot, and the plan to
upload it. Runs inside the caller's transaction (the actor row is locked)."""

from __future__ import annotations

import asyncpg

from domain.operations.suspend import SuspendPlan
from domain.placement import Demand
from domain.refs import ActorRef, SnapshotRef
from domain.states import ActorState
from store.errors import FailedPrecondition, NoCapacity, PinnedNodeFull
from store.nodes import Nodes, NodeStatus
from store.placement import Placement
from store.snapshots import Snapshots


class Pinning:
    """Helpers of the resume and suspend of a pinned actor."""

    def __init__(self, nodes: Nodes, placement: Placement, snapshots: Snapshots) -> None:
        self.nodes = nodes
        self.placement = placement
        self.snapshots = snapshots

    async def no_room(
        self, connection: asyncpg.Connection, ref: ActorRef, actor: asyncpg.Record, demand: Demand, error: NoCapacity
    ) -> NoCapacity:
        """Why a pinned actor cannot go back to its node (`demand.node`), as the error to raise.

        PinnedNodeFull when the node is alive and another node has room (the resume uploads the
        local snapshot and places the actor elsewhere); otherwise NoCapacity saying what to do.
        """
        node = str(demand.node)
        status = await self.nodes.status(connection, node)
        if status is None or not status.alive:
            latest = actor["latest_snapshot_id"] or actor["golden_snapshot_id"]
            fallback = await self.snapshots.ref(connection, latest) if latest else None
            back_to = f"generation {fallback.generation}" if fallback else "its template's golden snapshot"
            paused = actor["local_snapshot_id"] is not None
            what = "paused state" if paused else "snapshot (not uploaded yet)"
            drop = "the paused state" if paused else "that snapshot"
            return NoCapacity(
                f"actor {ref.key} is {actor['state']} and its {what} lies on node {node}, which is not "
                f"available ({_silence(status)}); resume it when the node is back, or "
                f"drop {drop} and go back to its last uploaded snapshot ({back_to}) with "
                f"'ate revert actor {ref.name} -a {ref.atespace}'",
                {"state": actor["state"], "pinned_node": node},
            )
        if await self.placement.elsewhere(demand):
            return PinnedNodeFull(
                f"{error.message}; other nodes have room: the paused snapshot is uploaded and the actor placed there",
                {"pinned_node": node},
            )
        return error

    async def atelet_of(self, connection: asyncpg.Connection, ref: ActorRef, local: SnapshotRef) -> str:
        """The address of the atelet holding `local`.

        Raises:
            FailedPrecondition: that node is not alive (nothing can read the paused snapshot).
        """
        status = await self.nodes.status(connection, local.node)
        if status is None or not status.alive:
            raise FailedPrecondition(
                f"actor {ref.key} is PAUSED on node {local.node}, which is not available ({_silence(status)}), "
                "so its paused snapshot cannot be uploaded; retry when the node is "
                f"back, or drop the paused state with 'ate revert actor {ref.name} -a {ref.atespace}'",
                {"state": ActorState.PAUSED.value, "pinned_node": local.node},
            )
        return status.address

    async def upload_plan(
        self, connection: asyncpg.Connection, ref: ActorRef, local_id: int, destination: SnapshotRef
    ) -> SuspendPlan:
        """The plan of a suspend from PAUSED: copy the local snapshot to `destination`."""
        local = await self.snapshots.ref(connection, local_id)
        address = await self.atelet_of(connection, ref, local)
        return SuspendPlan(already_suspended=False, snapshot=destination, upload_from=local, atelet_address=address)


def _silence(status: NodeStatus | None) -> str:
    """`no heartbeat for 63 s` (or `not registered` for a node the store does not know)."""
    return "not registered" if status is None else f"no heartbeat for {status.silent_seconds:.0f} s"
