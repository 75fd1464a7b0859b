"""Snapshots as a user sees them (issue 30, `ate get snapshots`): each one not yet collected, of
an atespace's actors and templates, with where it is, how big it is and what keeps it (the
actor's latest, its paused one, one awaiting upload, one being taken, a template's golden one, a
tag). A snapshot nothing keeps is the collector's to delete."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from store.sql import QUERIES as Q

MAX_LISTED = 1000


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
    """of_atespace, one."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def of_atespace(self, atespace: str, actor: str | None = None, limit: int = MAX_LISTED) -> list[ListedSnapshot]:
        """The snapshots of `atespace`'s actors and templates (of `actor` only, when given),
        by owner and newest generation first, at most `limit`."""
        rows = await self.pool.fetch(Q["snapshots_of_atespace"], atespace, actor, limit, None)
        return [ListedSnapshot.from_row(r) for r in rows]

    async def one(self, atespace: str, snapshot_id: int) -> ListedSnapshot | None:
        """Snapshot `snapshot_id` when it is one of `atespace`'s, not yet collected; else None."""
        row = await self.pool.fetchrow(Q["snapshots_of_atespace"], atespace, None, 1, snapshot_id)
        return ListedSnapshot.from_row(row) if row is not None else None
