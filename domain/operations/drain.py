"""EvictionDeadline (the drain of a node): input, plan, leftovers and result."""

from __future__ import annotations

from dataclasses import dataclass, field

from domain.refs import ActorRef, WorkerRef


@dataclass
class EvictionDeadlineInput:
    """Drain a node: suspend its actors now; at the deadline, crash what is left."""

    node: str
    deadline_seconds: float = 1800.0


@dataclass
class DrainPlan:
    """The actors on a node being drained: those to suspend, and those in other states."""

    running: list[ActorRef] = field(default_factory=list)
    other: list[tuple[ActorRef, str]] = field(default_factory=list)


@dataclass
class BeginDrainInput:
    """Input of begin_drain."""

    node: str
    deadline_seconds: float


@dataclass
class Leftover:
    """An actor still on a drained node at the deadline: bound to one of its workers, or PAUSED
    with its local snapshot there (worker None)."""

    actor: ActorRef
    worker: WorkerRef | None


@dataclass
class CrashInput:
    """Mark an actor CRASHED on a worker with a reason."""

    actor: ActorRef
    worker_id: int | None
    reason: str
    node: str | None = None
    """For a PAUSED actor (worker_id None): the drained node its local snapshot is on."""


@dataclass
class EvictionDeadlineResult:
    """What a drain did: actors suspended, and actors crashed at the deadline."""

    node: str
    suspended: list[str] = field(default_factory=list)
    crashed: list[str] = field(default_factory=list)
