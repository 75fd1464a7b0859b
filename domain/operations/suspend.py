"""SuspendActor's workflow input and result, its mark step's plan and its finalize input."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from domain.refs import ActorRef, SnapshotRef, WorkerRef

SUSPEND_MODES = ("sync", "async")
"""sync: the snapshot is in the storage location when the suspend returns. async: the checkpoint
is kept on the node and the suspend returns; an UploadSnapshot workflow uploads it in the
background, and until then the actor is pinned to that node (ARCHITECTURE.md, "Workflows")."""


@dataclass
class SuspendActorInput:
    """Input of the SuspendActor workflow; `mode` is one of SUSPEND_MODES.

    `reason` says why ate suspended the actor by itself (`idle for 300 s`, a pressure suspend);
    None when a user asked. With `if_idle` the suspend gives way to traffic: a router replica
    with a request in flight for the actor makes it abandon before the checkpoint.
    """

    actor: ActorRef
    mode: str = "sync"
    reason: str | None = None
    if_idle: bool = False


@dataclass
class SuspendActorResult:
    """Result of SuspendActor: the snapshot generation written (None if already SUSPENDED); for
    an async suspend, the local generation and the ID of the workflow uploading it."""

    actor: ActorRef
    already_suspended: bool = False
    generation: int | None = None
    timings: dict[str, float] = field(default_factory=dict)
    upload_workflow_id: str | None = None
    abandoned: bool = False
    """An `if_idle` suspend gave way to a request in flight: the actor is RUNNING."""
    egress_cut: int = 0
    """Outbound connections of the actor still open when the checkpoint's wait for them (the
    atelet's `egress_drain_seconds`) ran out: cut for the checkpoint."""


@dataclass
class BeginSuspendInput:
    """Input of begin_suspend: mark SUSPENDING and reserve the next snapshot generation
    (mode "async": a LOCAL one on the worker's node, uploaded in the background)."""

    actor: ActorRef
    operation_id: str
    mode: str = "sync"
    reason: str | None = None


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
class CompleteSnapshotInput:
    """Finish a suspend: mark the snapshot COMPLETED, the actor SUSPENDED, free the worker."""

    actor: ActorRef
    operation_id: str
    snapshot_id: int
    manifest: dict[str, Any]
    size_bytes: int
    abandoned: bool = False
    """For rollback_suspend: the operation gave way to traffic (not a failure: no error is recorded)."""


@dataclass
class SuspendCompletedInput:
    """Input of suspend_completed: did `snapshot_id` become the SUSPENDED actor's snapshot?"""

    actor: ActorRef
    snapshot_id: int
