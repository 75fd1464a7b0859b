"""References that cross process boundaries: an actor's identity, a placed worker, a stored snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from domain.states import SnapshotScope, SnapshotStorage


@dataclass(frozen=True)
class ActorRef:
    """An actor's identity: (atespace, name), both DNS-1123 labels."""

    atespace: str
    name: str

    @property
    def key(self) -> str:
        """`<atespace>/<name>`, as in the `ate-target-actor` header."""
        return f"{self.atespace}/{self.name}"

    @property
    def workflow_id(self) -> str:
        """The per-actor lock: at most one operation workflow runs under this ID."""
        return f"actor/{self.atespace}/{self.name}"

    def __str__(self) -> str:
        """The key, `<atespace>/<name>` (how messages and logs name an actor)."""
        return self.key


@dataclass
class WorkerRef:
    """Where a placement put an actor: worker identity plus how to reach its atelet."""

    worker_id: int
    pool: str
    name: str
    node: str
    ip: str
    atelet_address: str


@dataclass
class SnapshotRef:
    """A stored snapshot: where it is and the manifest that restore verifies."""

    snapshot_id: int
    generation: int
    scope: SnapshotScope
    uri: str
    manifest: dict[str, Any] | None = None
    storage: SnapshotStorage = SnapshotStorage.EXTERNAL
    node: str | None = None
    """The node holding a LOCAL snapshot (None for EXTERNAL ones)."""
    runsc_version: str | None = None
    """The runsc build that wrote a FULL snapshot, the only one that restores it (None: DATA
    scope, or not recorded)."""
    owner: str = ""
    """`actor/<atespace>/<name>` or `template/<atespace>/<name>` ("" when not read with it)."""
    completed_at: float | None = None
    """When it completed, seconds since the epoch (None: PENDING, or not read with it)."""
