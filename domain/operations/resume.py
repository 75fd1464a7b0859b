"""ResumeActor's workflow input and result and its placement step's plan."""

from __future__ import annotations

from dataclasses import dataclass, field

from domain.refs import ActorRef, SnapshotRef, WorkerRef
from domain.templates import ActorTemplateSpec


@dataclass
class ResumeActorInput:
    """Input of the ResumeActor workflow."""

    actor: ActorRef
    probe_timeout_seconds: float = 30.0


@dataclass
class ResumeActorResult:
    """Result of ResumeActor: where the actor runs now, step timings in seconds, and whether its
    snapshot came from the node's cache (object storage only)."""

    actor: ActorRef
    worker: WorkerRef | None
    already_running: bool = False
    restored_generation: int | None = None
    timings: dict[str, float] = field(default_factory=dict)
    snapshot_cache_hit: bool = False


@dataclass
class BeginResumeInput:
    """Input of the begin_resume activity (marks RESUMING and binds a worker in one transaction)."""

    actor: ActorRef
    operation_id: str


@dataclass
class ResumePlan:
    """What begin_resume decided: nothing to do (already RUNNING) or a worker and a snapshot."""

    already_running: bool
    worker: WorkerRef | None = None
    snapshot: SnapshotRef | None = None
    spec: ActorTemplateSpec | None = None
