"""Domain types shared by workflows, activities and the API: states, refs, workflow inputs/results.

Standard library only, so that workflow code (which runs in Temporal's deterministic sandbox)
can import it. None of these are pydantic models; pydantic lives at the API edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

TASK_QUEUE = "ate-control"
"""The Temporal task queue every ate workflow and activity runs on."""

WORKFLOW_TASK_TIMEOUT = timedelta(seconds=3)
"""Workflow task timeout of every ate workflow (the server default is 10 s): how long a workflow
waits after its worker died before another worker takes it over. Long local activities (a
restore) keep their task alive with heartbeats, so this bounds failover, not step length."""

SEARCH_ATTRIBUTES = ("AteAtespace", "AteActor", "AteOperation")
"""Keyword search attributes set on every workflow (registered on the Temporal server)."""


class ActorState(StrEnum):
    """Actor states (ARCHITECTURE.md, "Actor states")."""

    SUSPENDED = "SUSPENDED"
    RESUMING = "RESUMING"
    RUNNING = "RUNNING"
    SUSPENDING = "SUSPENDING"
    PAUSING = "PAUSING"
    PAUSED = "PAUSED"
    REVERTING = "REVERTING"
    CRASHED = "CRASHED"


class WorkerState(StrEnum):
    """Worker states: ACTIVE takes actors; UNAVAILABLE does not."""

    ACTIVE = "ACTIVE"
    UNAVAILABLE = "UNAVAILABLE"


class SnapshotScope(StrEnum):
    """FULL: memory + rootfs delta + durable dirs. DATA: durable dirs only."""

    FULL = "FULL"
    DATA = "DATA"


class SnapshotStorage(StrEnum):
    """EXTERNAL: in the template's storage location, restorable on any node. LOCAL: on one
    node's disk only (a pause); the actor is pinned to that node while it has one."""

    EXTERNAL = "EXTERNAL"
    LOCAL = "LOCAL"


class SnapshotState(StrEnum):
    """PENDING: being written (never restored from). COMPLETED: data stored and verified."""

    PENDING = "PENDING"
    COMPLETED = "COMPLETED"


class Operation(StrEnum):
    """Workflow type names; also the value of the `AteOperation` search attribute."""

    RESUME = "ResumeActor"
    SUSPEND = "SuspendActor"
    PAUSE = "PauseActor"
    REVERT = "RevertActor"
    GOLDEN_SNAPSHOT = "GoldenSnapshot"
    UPLOAD = "UploadSnapshot"


TRANSITIONS: dict[Operation, tuple[frozenset[ActorState], ActorState, ActorState]] = {
    Operation.RESUME: (frozenset({ActorState.SUSPENDED, ActorState.PAUSED}), ActorState.RESUMING, ActorState.RUNNING),
    Operation.SUSPEND: (
        frozenset({ActorState.RUNNING, ActorState.PAUSED}),
        ActorState.SUSPENDING,
        ActorState.SUSPENDED,
    ),
    Operation.PAUSE: (frozenset({ActorState.RUNNING}), ActorState.PAUSING, ActorState.PAUSED),
    Operation.REVERT: (
        frozenset(
            {ActorState.RUNNING, ActorState.PAUSED, ActorState.CRASHED, ActorState.RESUMING, ActorState.SUSPENDING}
        ),
        ActorState.REVERTING,
        ActorState.SUSPENDED,
    ),
}
"""Operation -> (states it starts from, transitional state, final state)."""


@dataclass(frozen=True)
class ActorRef:
    """An actor's identity: (atespace, name), both DNS-1123 labels."""

    atespace: str
    name: str

    @property
    def key(self) -> str:
        """`<atespace>/<name>`, as in the `ate-target-actor` header."""
        return f"{self.atespace}/{self.name}"

    @property
    def workflow_id(self) -> str:
        """The per-actor lock: at most one operation workflow runs under this ID."""
        return f"actor/{self.atespace}/{self.name}"


def template_workflow_id(atespace: str, template: str) -> str:
    """Workflow ID (and placement holder) of a template's GoldenSnapshot workflow."""
    return f"template/{atespace}/{template}"


@dataclass
class WorkerRef:
    """Where a placement put an actor: worker identity plus how to reach its atelet."""

    worker_id: int
    pool: str
    name: str
    node: str
    ip: str
    atelet_address: str


@dataclass
class SnapshotRef:
    """A stored snapshot: where it is and the manifest that restore verifies."""

    snapshot_id: int
    generation: int
    scope: SnapshotScope
    uri: str
    manifest: dict[str, Any] | None = None
    storage: SnapshotStorage = SnapshotStorage.EXTERNAL
    node: str | None = None
    """The node holding a LOCAL snapshot (None for EXTERNAL ones)."""


# ---- workflow inputs and results ------------------------------------------------------------


@dataclass
class ResumeActorInput:
    """Input of the ResumeActor workflow."""

    actor: ActorRef
    probe_timeout_seconds: float = 30.0


@dataclass
class ResumeActorResult:
    """Result of ResumeActor: where the actor runs now, and step timings in seconds."""

    actor: ActorRef
    worker: WorkerRef | None
    already_running: bool = False
    restored_generation: int | None = None
    timings: dict[str, float] = field(default_factory=dict)


SUSPEND_MODES = ("sync", "async")
"""sync: the snapshot is in the storage location when the suspend returns. async: the checkpoint
is kept on the node and the suspend returns; an UploadSnapshot workflow uploads it in the
background, and until then the actor is pinned to that node (ARCHITECTURE.md, "Workflows")."""


@dataclass
class SuspendActorInput:
    """Input of the SuspendActor workflow; `mode` is one of SUSPEND_MODES."""

    actor: ActorRef
    mode: str = "sync"


@dataclass
class SuspendActorResult:
    """Result of SuspendActor: the snapshot generation written (None if already SUSPENDED); for
    an async suspend, the local generation and the ID of the workflow uploading it."""

    actor: ActorRef
    already_suspended: bool = False
    generation: int | None = None
    timings: dict[str, float] = field(default_factory=dict)
    upload_workflow_id: str | None = None


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


# ---- activity inputs and results ------------------------------------------------------------


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
    spec: dict[str, Any] = field(default_factory=dict)


@dataclass
class AteletRunInput:
    """Boot (snapshot None) or restore (snapshot set) a workload on a worker."""

    operation_id: str
    worker: WorkerRef
    holder: ActorRef
    spec: dict[str, Any]
    snapshot: SnapshotRef | None
    probe_timeout_seconds: float
    placement: str | None = None
    """The placement holder key this call runs under (default: the holder's workflow ID)."""


@dataclass
class AteletRunResult:
    """Timings reported by the atelet, in seconds."""

    worker_ip: str
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class FinishInput:
    """Input of the finalize/rollback activities: which operation's state to settle."""

    actor: ActorRef
    operation_id: str
    error: str | None = None


@dataclass
class BeginSuspendInput:
    """Input of begin_suspend: mark SUSPENDING and reserve the next snapshot generation
    (mode "async": a LOCAL one on the worker's node, uploaded in the background)."""

    actor: ActorRef
    operation_id: str
    mode: str = "sync"


@dataclass
class SuspendPlan:
    """What begin_suspend decided: nothing to do, or where to checkpoint to.

    From RUNNING: checkpoint the sandbox on `worker` into `snapshot`. From PAUSED: no worker;
    copy the local snapshot `upload_from` into `snapshot` through the atelet at `atelet_address`
    (the node holding it).
    """

    already_suspended: bool
    worker: WorkerRef | None = None
    snapshot: SnapshotRef | None = None
    upload_from: SnapshotRef | None = None
    atelet_address: str | None = None


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


@dataclass
class AteletCopyInput:
    """Copy a completed snapshot (`source`, a LOCAL one) to `destination`'s URI through the
    atelet at `atelet_address` (the upload of a paused actor's snapshot)."""

    operation_id: str
    atelet_address: str
    source: SnapshotRef
    destination: SnapshotRef


@dataclass
class AteletCheckpointInput:
    """Checkpoint the holder on a worker into snapshot.uri with snapshot.scope."""

    operation_id: str
    worker: WorkerRef
    holder: ActorRef
    snapshot: SnapshotRef
    placement: str | None = None
    """The placement holder key this call runs under (default: the holder's workflow ID)."""


@dataclass
class AteletCheckpointResult:
    """The manifest the atelet wrote, the stored size in bytes and timings in seconds."""

    manifest: dict[str, Any]
    size_bytes: int
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class CompleteSnapshotInput:
    """Finish a suspend: mark the snapshot COMPLETED, the actor SUSPENDED, free the worker."""

    actor: ActorRef
    operation_id: str
    snapshot_id: int
    manifest: dict[str, Any]
    size_bytes: int


@dataclass
class AteletTerminateInput:
    """Stop whatever the holder runs on a worker (best effort, idempotent)."""

    operation_id: str
    worker: WorkerRef
    holder: ActorRef


@dataclass
class GoldenPlan:
    """Where to boot a template's golden actor and where to store its snapshot."""

    worker: WorkerRef
    snapshot: SnapshotRef
    spec: dict[str, Any]


# ---- RevertActor, EvictionDeadline, SnapshotGarbageCollection ---------------------------------


@dataclass
class ActorOperation:
    """An actor and the operation (workflow run) acting on it."""

    actor: ActorRef
    operation_id: str


@dataclass
class RevertActorInput:
    """Input of the RevertActor workflow."""

    actor: ActorRef


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
    """Input of finish_revert: settle SUSPENDED, with a note recorded as the actor's last error."""

    actor: ActorRef
    operation_id: str
    note: str


@dataclass
class FenceInput:
    """Take a worker out of placement because its node could not confirm a sandbox stopped."""

    worker_id: int
    reason: str


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
