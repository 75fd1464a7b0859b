"""/v1/atespaces/{atespace}/snapshots: the snapshots of an atespace's actors and templates as a
user sees them (issue 30; `store.snapshot_listing`): generation, scope, state, size, where it is
(a node for a local one, else the storage location) and what keeps it. Read with `snapshots.read`
(viewer and above; not the router); a snapshot's files are named with their sizes, never their contents."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from api.access.guard import needs
from api.deps import StoreDep
from api.errors import InvalidArgument
from api.names import check_name
from domain.access import Permission
from store import NotFound
from store.snapshot_listing import ListedSnapshot

router = APIRouter(tags=["snapshots"])
PREFIX = "/v1/atespaces/{atespace}/snapshots"


class SnapshotFilePublic(BaseModel):
    """One file of a snapshot (memory, rootfs delta, a durable dir's archive, its output)."""

    path: str
    size_bytes: int


class SnapshotPublic(BaseModel):
    """A snapshot as the API shows it."""

    id: int
    owner_kind: Literal["actor", "template"]
    owner: str = Field(description="the actor's or the template's name")
    generation: int
    scope: str = Field(description="FULL (memory, rootfs delta, durable dirs) or DATA (durable dirs)")
    state: str = Field(description="PENDING (being taken) or COMPLETED")
    storage: str = Field(description="EXTERNAL (the storage location) or LOCAL (on `node`)")
    node: str | None
    location: str = Field(description="its URI: file://, s3://, or local:// on its node")
    sandbox_class: str
    size_bytes: int | None = Field(description="the sum of its files' sizes (what it takes at rest)")
    kept_by: list[str] = Field(description="latest, paused, awaiting upload, in progress, golden, tag <name>; "
                               "empty: nothing keeps it, the collector deletes it")  # fmt: skip
    created_at: datetime
    completed_at: datetime | None
    files: list[SnapshotFilePublic] | None = Field(default=None, description="one snapshot's GET only")


class SnapshotList(BaseModel):
    """An atespace's snapshots, by owner and newest generation first."""

    items: list[SnapshotPublic]


def snapshot_view(listed: ListedSnapshot, files: bool = False) -> SnapshotPublic:
    """The API shape of a listed snapshot (`files` only for one snapshot's GET)."""
    kind, _, name = listed.owner.partition("/")
    return SnapshotPublic(
        id=listed.id, owner_kind="template" if kind == "template" else "actor", owner=name.partition("/")[2],
        generation=listed.generation, scope=listed.scope, state=listed.state, storage=listed.storage,
        node=listed.node, location=listed.uri, sandbox_class=listed.sandbox_class, size_bytes=listed.size_bytes,
        kept_by=listed.kept_by, created_at=listed.created_at, completed_at=listed.completed_at,
        files=[SnapshotFilePublic(**f) for f in listed.files] if files else None,
    )  # fmt: skip


@router.get(PREFIX, **needs(Permission.SNAPSHOTS_READ))
async def list_snapshots(atespace: str, store: StoreDep, actor: str | None = None) -> SnapshotList:
    """The atespace's snapshots (`?actor=NAME`: that actor's only)."""
    if actor is not None:
        check_name("actor", actor)
    await store.atespaces.get(atespace)
    return SnapshotList(items=[snapshot_view(s) for s in await store.snapshot_listing.of_atespace(atespace, actor)])


@router.get(PREFIX + "/{snapshot_id}", **needs(Permission.SNAPSHOTS_READ))
async def get_snapshot(atespace: str, snapshot_id: int, store: StoreDep) -> SnapshotPublic:
    """One snapshot of the atespace, with its files."""
    if snapshot_id < 1:
        raise InvalidArgument(f"snapshot_id: {snapshot_id} is not a snapshot ID (they start at 1)",
                              {"field": "snapshot_id"})  # fmt: skip
    await store.atespaces.get(atespace)
    found = await store.snapshot_listing.one(atespace, snapshot_id)
    if found is None:
        raise NotFound(f"snapshot {snapshot_id} not found in atespace {atespace} (see 'ate get snapshots -a "
                            f"{atespace}'); a collected snapshot is gone")  # fmt: skip
    return snapshot_view(found, files=True)
