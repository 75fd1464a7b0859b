"""PauseActor's workflow input and result and its mark step's plan."""

from __future__ import annotations

from dataclasses import dataclass, field

from domain.refs import ActorRef, SnapshotRef, WorkerRef


@dataclass
class PauseActorInput:
    """Input of the PauseActor workflow; `reason` and `if_idle` as SuspendActorInput's."""

    actor: ActorRef
    reason: str | None = None
    if_idle: bool = False


@dataclass
class PauseActorResult:
    """Result of PauseActor: the local snapshot's generation and node (None if already PAUSED)."""

    actor: ActorRef
    already_paused: bool = False
    generation: int | None = None
    node: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    abandoned: bool = False
    """An `if_idle` pause gave way to a request in flight: the actor is RUNNING."""


@dataclass
class PausePlan:
    """What begin_pause decided: nothing to do (already PAUSED), or where to checkpoint to (a
    LOCAL snapshot on the worker's node)."""

    already_paused: bool
    worker: WorkerRef | None = None
    snapshot: SnapshotRef | None = None
