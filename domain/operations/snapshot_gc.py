"""SnapshotGarbageCollection: input, the snapshots it finds and the deletion of one."""

from __future__ import annotations

from dataclasses import dataclass

from domain.states import SnapshotStorage


@dataclass
class GarbageSnapshot:
    """A snapshot no actor, tag or template needs."""

    snapshot_id: int
    uri: str
    owner: str
    generation: int
    storage: SnapshotStorage = SnapshotStorage.EXTERNAL
    node: str | None = None
    """The node holding a LOCAL snapshot: only its atelet can delete it."""


@dataclass
class SnapshotGcInput:
    """Input of the snapshot garbage collector: batch size, minimum age and pause between rounds."""

    batch: int = 100
    min_age_seconds: float = 60.0
    interval_seconds: float = 60.0
    rounds_before_continue_as_new: int = 100
    rounds: int = 0


@dataclass
class DeleteSnapshotInput:
    """Delete one snapshot's data through an atelet, then its row."""

    snapshot: GarbageSnapshot
