"""Snapshots as a user sees them (issue 30, `ate get snapshots`): each one not yet collected, of
an atespace's actors and templates, with where it is, how big it is and what keeps it (the
actor's latest, its paused one, one awaiting upload, one being taken, a template's golden one, a
tag, another actor started from it (a fork, or a create from a tag), or being one of the last
generations its template retains). A snapshot nothing keeps is the collector's to delete."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from domain.refs import ActorRef
from domain.templates import RETAIN_GENERATIONS_DEFAULT
from store.errors import InvalidArgument
from store.sql import QUERIES as Q

MAX_LISTED = 1000


async def kept_generations(connection: asyncpg.Connection, ref: ActorRef) -> list[int]:
    """The COMPLETED generations of the actor's own snapshots not claimed by the collector, oldest
    first (what `--to-generation` may name)."""
    return [r["generation"] for r in await connection.fetch(Q["kept_generations"], ref.workflow_id)]


async def kept_generation(
    connection: asyncpg.Connection, ref: ActorRef, generation: int, field: str = "to_generation"
) -> int:
    """The snapshot ID of a kept COMPLETED generation of the actor's own, its row locked for the
    caller's transaction if it runs one (a claim by the collector waits).

    Raises:
        InvalidArgument: none such; the message names `field` and the kept generations.
    """
    snapshot_id = await connection.fetchval(Q["kept_generation"], ref.workflow_id, generation)
    if snapshot_id is not None:
        return int(snapshot_id)
    kept = await kept_generations(connection, ref)
    allowed = ", ".join(str(g) for g in kept) if kept else "none yet (it has never been suspended)"
    raise InvalidArgument(
        f"{field}: actor {ref.key} has no kept completed generation {generation}; kept: {allowed}. Older "
        "ones are deleted beyond the template's snapshotConfig.retainGenerations (tag a snapshot to keep it)",
        {"field": field, "kept_generations": kept},
    )


@dataclass(frozen=True)
class ListedSnapshot:
    """One snapshot: `owner` is `actor/<atespace>/<name>` or `template/<atespace>/<name>`;
    `size_bytes` the sum of its files' sizes as its manifest records them (the bytes it takes in
    its store), or the size recorded at its completion when it has no manifest yet; `kept_by`
    what keeps it (empty: nothing, the collector deletes it)."""

    id: int
    owner: str
    generation: int
    scope: str
    storage: str
    state: str
    uri: str
    node: str | None
    sandbox_class: str
    size_bytes: int | None
    created_at: datetime
    completed_at: datetime | None
    kept_by: list[str]
    files: list[dict[str, Any]]

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> ListedSnapshot:
        """Build from a row of `snapshots_of_atespace`."""
        manifest = row["manifest"] or {}
        files: list[dict[str, Any]] = [{"path": str(f.get("path")), "size_bytes": int(f.get("size_bytes") or 0)}
                                       for f in manifest.get("files") or [] if isinstance(f, dict)]  # fmt: skip
        size = sum(int(f["size_bytes"]) for f in files) if files else row["size_bytes"]
        return cls(
            id=row["id"], owner=row["owner"], generation=row["generation"], scope=row["scope"],
            storage=row["storage"], state=row["state"], uri=row["uri"], node=row["node"],
            sandbox_class=row["sandbox_class"], size_bytes=size, created_at=row["created_at"],
            completed_at=row["completed_at"], kept_by=list(row["kept_by"]), files=files,
        )  # fmt: skip


class SnapshotListing:
    """of_atespace, one, kept, check_kept."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def of_atespace(self, atespace: str, actor: str | None = None, limit: int = MAX_LISTED) -> list[ListedSnapshot]:
        """The snapshots of `atespace`'s actors and templates (of `actor` only, when given),
        by owner and newest generation first, at most `limit`."""
        rows = await self.pool.fetch(
            Q["snapshots_of_atespace"], atespace, actor, limit, None, RETAIN_GENERATIONS_DEFAULT
        )
        return [ListedSnapshot.from_row(r) for r in rows]

    async def one(self, atespace: str, snapshot_id: int) -> ListedSnapshot | None:
        """Snapshot `snapshot_id` when it is one of `atespace`'s, not yet collected; else None."""
        row = await self.pool.fetchrow(
            Q["snapshots_of_atespace"], atespace, None, 1, snapshot_id, RETAIN_GENERATIONS_DEFAULT
        )
        return ListedSnapshot.from_row(row) if row is not None else None

    async def check_kept(self, ref: ActorRef, generation: int) -> None:
        """Refuse a generation a revert cannot go back to, before anything is started.

        Raises:
            InvalidArgument: not a kept COMPLETED generation of the actor's own (`kept_generation`).
        """
        async with self.pool.acquire() as connection:
            await kept_generation(connection, ref, generation)

    async def kept(self, ref: ActorRef) -> list[int]:
        """The actor's kept COMPLETED generations, oldest first (`kept_generations`)."""
        async with self.pool.acquire() as connection:
            return await kept_generations(connection, ref)
