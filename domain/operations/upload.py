"""UploadSnapshot (the background half of an async suspend): inputs, plan and result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from domain.refs import ActorRef, SnapshotRef


@dataclass
class UploadSnapshotInput:
    """Input of the UploadSnapshot workflow: upload `local_snapshot_id`, an async suspend's
    checkpoint, for `actor`; give up after `attempts` tries `retry_seconds` apart (doubling)."""

    actor: ActorRef
    local_snapshot_id: int
    attempts: int = 8
    retry_seconds: float = 2.0


@dataclass
class UploadPlan:
    """What begin_upload decided: nothing to do (the local snapshot was consumed or dropped
    meanwhile), or copy `source` to `destination` through the atelet at `atelet_address`."""

    needed: bool
    source: SnapshotRef | None = None
    destination: SnapshotRef | None = None
    atelet_address: str | None = None


@dataclass
class UploadInput:
    """Input of begin_upload / abandon_upload."""

    actor: ActorRef
    operation_id: str
    local_snapshot_id: int


@dataclass
class CompleteUploadInput:
    """Input of complete_upload: the uploaded snapshot and what the atelet wrote."""

    actor: ActorRef
    operation_id: str
    local_snapshot_id: int
    snapshot_id: int
    manifest: dict[str, Any]
    size_bytes: int


@dataclass
class UploadSnapshotResult:
    """Result of UploadSnapshot: the uploaded generation, or why nothing was uploaded."""

    actor: ActorRef
    generation: int | None = None
    skipped: str | None = None
