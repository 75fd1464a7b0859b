"""Snapshot rows: reserving a generation (PENDING), references for restore, and the garbage the
snapshot GC deletes. `reserve` and `ref` run inside the caller's transaction."""

from __future__ import annotations

import asyncpg

from domain.operations.snapshot_gc import GarbageSnapshot
from domain.refs import SnapshotRef
from domain.states import SnapshotScope, SnapshotStorage
from domain.templates import RETAIN_GENERATIONS_DEFAULT, ActorTemplateSpec
from store.errors import NotFound, VersionConflict
from store.snapshot_names import LOCAL_LOCATION, snapshot_uri
from store.sql import QUERIES as Q


class Snapshots:
    """The snapshots table."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def ref(self, connection: asyncpg.Connection, snapshot_id: int) -> SnapshotRef:
        """The snapshot with that id, with its manifest.

        Raises:
            NotFound: no such snapshot.
        """
        row = await connection.fetchrow(Q["get_snapshot"], snapshot_id)
        if row is None:
            raise NotFound(f"snapshot {snapshot_id} not found")
        return SnapshotRef(
            snapshot_id=row["id"],
            generation=row["generation"],
            scope=SnapshotScope(row["scope"]),
            uri=row["uri"],
            manifest=row["manifest"],
            storage=SnapshotStorage(row["storage"]),
            node=row["node"],
            runsc_version=row["runsc_version"],
            owner=row["owner"],
            completed_at=row["completed_at"].timestamp() if row["completed_at"] is not None else None,
        )

    async def reserve(
        self,
        connection: asyncpg.Connection,
        *,
        owner: str,
        operation_id: str,
        spec: ActorTemplateSpec,
        scope: SnapshotScope,
        local_node: str | None = None,
    ) -> SnapshotRef:
        """Record the owner's next generation as a PENDING snapshot, inside the caller's transaction.

        EXTERNAL in the template's storage location, or LOCAL on `local_node` when given. The
        generation is max+1 of the owner's (the caller holds the owner's row lock; UNIQUE
        (owner, generation) backs it).
        """
        generation = await connection.fetchval(Q["next_generation"], owner)
        location = LOCAL_LOCATION if local_node else spec.snapshot_config.storage_location
        storage = SnapshotStorage.LOCAL if local_node else SnapshotStorage.EXTERNAL
        uri = snapshot_uri(location, owner, generation, operation_id)
        snapshot_id = await connection.fetchval(
            Q["insert_snapshot"],
            owner,
            generation,
            scope.value,
            uri,
            spec.sandbox_class,
            operation_id,
            local_node,
            storage.value,
        )
        return SnapshotRef(
            snapshot_id=snapshot_id, generation=generation, scope=scope, uri=uri, storage=storage, node=local_node
        )

    async def garbage(self, limit: int, min_age_seconds: float) -> list[GarbageSnapshot]:
        """Claim and return at most `limit` snapshots nothing needs (owner gone, superseded by
        the template's `retainGenerations` newer COMPLETED generations, a stale PENDING or LOCAL
        one), oldest first, with those claimed before whose deletion did not finish.

        Each is claimed (deleted_at set) in a transaction holding its owner actor's row lock,
        after checking again that nothing refers to it: a revert to its generation, a fork from
        it or a tag of it takes the same lock and refuses a claimed snapshot, so none of them can
        come to refer to a snapshot whose data the collector is deleting.
        """
        rows = await self.pool.fetch(Q["garbage_snapshots"], limit, min_age_seconds, RETAIN_GENERATIONS_DEFAULT, None)
        claimed = []
        for row in rows:
            if row["deleted_at"] is None and not await self._claim(row["id"], row["owner"], min_age_seconds):
                continue
            claimed.append(
                GarbageSnapshot(
                    snapshot_id=row["id"],
                    uri=row["uri"],
                    owner=row["owner"],
                    generation=row["generation"],
                    storage=SnapshotStorage(row["storage"]),
                    node=row["node"],
                )
            )
        return claimed

    async def _claim(self, snapshot_id: int, owner: str, min_age_seconds: float) -> bool:
        """Claim one snapshot for deletion if it is still garbage under its owner's lock."""
        kind, atespace, name = [*owner.split("/", 2), "", ""][:3]
        async with self.pool.acquire() as connection, connection.transaction():
            if kind == "actor":
                await connection.fetchrow(Q["lock_actor"], atespace, name)
            still = await connection.fetchrow(
                Q["garbage_snapshots"], 1, min_age_seconds, RETAIN_GENERATIONS_DEFAULT, snapshot_id
            )
            if still is None:
                return False
            await connection.execute(Q["claim_snapshot"], snapshot_id)
            return True

    async def forget(self, snapshot_id: int) -> None:
        """Delete a snapshot row once its data is gone (idempotent).

        Raises:
            VersionConflict: the snapshot is referenced again meanwhile (it is kept).
        """
        try:
            await self.pool.execute(Q["delete_snapshot_row"], snapshot_id)
        except asyncpg.ForeignKeyViolationError as error:
            raise VersionConflict(f"snapshot {snapshot_id} is referenced again; not deleted") from error
