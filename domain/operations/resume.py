"""ResumeActor's workflow input and result, its placement step's plan, and the input and result
of its one activity that places, restores and marks RUNNING."""

from __future__ import annotations

from dataclasses import dataclass, field

from domain.operations.atelet_calls import AteletRunResult
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
    """What begin_resume decided: nothing to do (already RUNNING), a worker and a snapshot, or
    (`thaw`) the worker where the FROZEN actor's sandbox waits to be thawed."""

    already_running: bool
    worker: WorkerRef | None = None
    snapshot: SnapshotRef | None = None
    spec: ActorTemplateSpec | None = None
    thaw: bool = False


@dataclass
class PlaceAndRestoreInput:
    """Input of the place_and_restore activity: placement (`begin_resume`), the atelet's restore,
    then RESUMING -> RUNNING, in one regular activity of this operation."""

    actor: ActorRef
    operation_id: str
    probe_timeout_seconds: float


@dataclass
class PlaceAndRestoreResult:
    """What place_and_restore did: its placement plan, the restore's result (None when the actor
    was RUNNING already), and the placement's own seconds."""

    plan: ResumePlan
    restored: AteletRunResult | None = None
    placement_seconds: float = 0.0
    resumed_earlier: bool = False
    """An earlier attempt of this operation restored the actor and marked it RUNNING (its answer
    was lost): `plan.already_running` is then this operation's own doing."""


@dataclass
class ResumeProgress:
    """How far a resume operation got, read after its restore step failed: whether it marked the
    actor RUNNING, and which worker it holds while the actor is still RESUMING under it."""

    running: bool
    worker: WorkerRef | None = None
    thaw: bool = False
    """The resume was thawing a FROZEN actor in place: a failure goes back to FROZEN, never
    terminating the sandbox (its memory is the actor's)."""
