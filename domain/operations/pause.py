"""PauseActor's workflow input and result and its mark step's plan."""

from __future__ import annotations

from dataclasses import dataclass, field

from domain.refs import ActorRef, SnapshotRef, WorkerRef


@dataclass
class PauseActorInput:
    """Input of the PauseActor workflow."""

    actor: ActorRef


@dataclass
class PauseActorResult:
    """Result of PauseActor: the local snapshot's generation and node (None if already PAUSED)."""

    actor: ActorRef
    already_paused: bool = False
    generation: int | None = None
    node: str | None = None
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class PausePlan:
    """What begin_pause decided: nothing to do (already PAUSED), or where to checkpoint to (a
    LOCAL snapshot on the worker's node)."""

    already_paused: bool
    worker: WorkerRef | None = None
    snapshot: SnapshotRef | None = None
