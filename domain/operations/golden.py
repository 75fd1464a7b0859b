"""GoldenSnapshot (one per actor template): input, result and the boot plan."""

from __future__ import annotations

from dataclasses import dataclass

from domain.refs import SnapshotRef, WorkerRef
from domain.templates import ActorTemplateSpec


@dataclass
class GoldenSnapshotInput:
    """Input of the GoldenSnapshot workflow for one actor template."""

    atespace: str
    template: str
    probe_timeout_seconds: float = 60.0
    placement_wait_seconds: float = 600.0


@dataclass
class GoldenSnapshotResult:
    """Result of GoldenSnapshot: the template's phase and, when Ready, its golden snapshot."""

    phase: str
    reason: str | None = None
    snapshot_id: int | None = None


@dataclass
class GoldenPlan:
    """Where to boot a template's golden actor and where to store its snapshot."""

    worker: WorkerRef
    snapshot: SnapshotRef
    spec: ActorTemplateSpec
