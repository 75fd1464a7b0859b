"""RevertActor's workflow input and result, its plan, and the fencing of a worker."""

from __future__ import annotations

from dataclasses import dataclass

from domain.refs import ActorRef, WorkerRef


@dataclass
class RevertActorInput:
    """Input of the RevertActor workflow.

    `recovery_of`: set when the api-server started it on its own because the actor is CRASHED
    and its template says `onCrash: Revert`; the crash's reason, recorded with the revert in the
    actor's history.
    """

    actor: ActorRef
    recovery_of: str | None = None
    to_generation: int | None = None
    """Go back to this kept COMPLETED generation of the actor's own snapshots (`ate revert actor
    NAME --to-generation G`) instead of its latest; also from SUSPENDED."""


@dataclass
class BeginRevertInput:
    """Input of begin_revert: the actor, the revert's operation ID, and the generation it goes back
    to (None: the latest COMPLETED snapshot stays)."""

    actor: ActorRef
    operation_id: str
    to_generation: int | None = None


@dataclass
class RevertPlan:
    """What begin_revert found: the state it reverts from, the worker to clean, node liveness."""

    from_state: str
    worker: WorkerRef | None
    node_alive: bool


@dataclass
class RevertActorResult:
    """Result of RevertActor: the state it left, and whether the old worker had to be fenced."""

    actor: ActorRef
    from_state: str
    fenced: bool = False


@dataclass
class FinishRevertInput:
    """Input of finish_revert: settle SUSPENDED, with a note recorded as the actor's last error;
    `recovery_of` (an automatic recovery's crash) also goes into the operation's record."""

    actor: ActorRef
    operation_id: str
    note: str
    recovery_of: str | None = None


@dataclass
class FenceInput:
    """Take a worker out of placement because its node could not confirm a sandbox stopped."""

    worker_id: int
    reason: str
