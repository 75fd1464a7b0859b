"""ResumeActor's workflow input and result, its placement step's plan, and the input and result
of its one activity that places, restores and marks RUNNING."""

from __future__ import annotations

from dataclasses import dataclass, field

from domain.operations.atelet_calls import AteletRunResult
from domain.refs import ActorRef, SnapshotRef, WorkerRef
from domain.templates import ActorTemplateSpec

ROOM_POLL_SECONDS = 0.5
"""The time between two tries of a resume that waits for room (`ResumeActorInput.room_wait_seconds`),
as asked of a workflow timer (which fires up to `TIMER_LATENESS_SECONDS` later); a pressure move
that empties a worker for it tells it at once (`domain.operations.pressure.ROOM_SIGNAL`)."""

TIMER_LATENESS_SECONDS = 1.0
"""How late a workflow timer may fire, in seconds: on the dev server (tuned as ate dev runs it) a
0.5 s timer fired 0.98 s after it was set, a 0.38 s one 0.99 s after (2026-12-06). A resume that
waits for room sets no timer that could fire after its room deadline: it gives up while more than
this is left, so its "no room" answer is not late."""

MAX_ROOM_WAIT_SECONDS = 300.0
"""The longest a resume may be asked to wait for room (it holds the actor's lock meanwhile)."""

ROOM_ANSWER_MARGIN_SECONDS = 0.5
"""How much sooner than its caller's deadline a resume stops waiting for room, in seconds: the
"no room" answer (503 with what placement found) has to travel from the workflow through the API
to the caller before the caller gives up with "still resuming" (504). The API caps a resume's
`room_wait_seconds` at its `timeout_seconds` less this; the router asks for its remaining park
budget less this."""


@dataclass
class ResumeActorInput:
    """Input of the ResumeActor workflow.

    `room_wait_seconds`: how long the resume may wait for a worker with room when none has any
    and no pressure move can make some for it now. It waits in the room queue (resumes short of
    room are served in the order they came: a move empties a worker for the oldest waiter that
    worker would take) and tries placement and pressure again when told that a worker was
    emptied for it, or after `ROOM_POLL_SECONDS`. 0 (runs recorded before, and callers that want
    the answer at once): NoCapacity at once.
    """

    actor: ActorRef
    probe_timeout_seconds: float = 30.0
    room_wait_seconds: float = 0.0


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
    template: str = ""
    """The actor's template (a label of its output)."""


@dataclass
class PlaceAndRestoreInput:
    """Input of the place_and_restore activity: placement (`begin_resume`), the atelet's restore,
    then RESUMING -> RUNNING, in one regular activity of this operation."""

    actor: ActorRef
    operation_id: str
    probe_timeout_seconds: float
    waited_for_room: bool = False
    """Whether this resume joined the room queue (its bind leaves it)."""


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
