"""Inputs and results of the activities that call an atelet (run/restore, checkpoint, copy, terminate)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from domain.refs import ActorRef, SnapshotRef, WorkerRef
from domain.templates import ActorTemplateSpec


@dataclass
class AteletRunInput:
    """Boot (snapshot None) or restore (snapshot set) a workload on a worker."""

    operation_id: str
    worker: WorkerRef
    holder: ActorRef
    spec: ActorTemplateSpec
    snapshot: SnapshotRef | None
    probe_timeout_seconds: float
    placement: str | None = None
    """The placement holder key this call runs under (default: the holder's workflow ID)."""
    mark_running: bool = False
    """After a successful restore, mark the holder RUNNING (ResumeActor's finalize) in the same
    activity: the commit's NOTIFY reaches the api-server without waiting for a workflow task."""
    template: str = ""
    """The holder's template (a label of the sandbox's output; "" in runs from before it)."""
    golden: bool = False
    """A template's golden boot (its output is not shipped to the API: no actor owns it)."""


@dataclass
class AteletRunResult:
    """Timings reported by the atelet, in seconds, and whether a snapshot in object storage came
    from the node's cache."""

    worker_ip: str
    timings: dict[str, float] = field(default_factory=dict)
    snapshot_cache_hit: bool = False
    marked_running_at: float | None = None
    """Unix time (seconds) of the commit that marked the holder RUNNING, when `mark_running` asked
    for it; None otherwise, and for a repeat that found the holder RUNNING already."""


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
    complete_suspend: bool = False
    """After a successful checkpoint, complete the suspend (SuspendActor's finalize: snapshot
    COMPLETED, actor SUSPENDED, worker freed) in the same activity, so the commit's NOTIFY reaches
    the api-server without waiting for a workflow task."""


@dataclass
class AteletCheckpointResult:
    """The manifest the atelet wrote, the stored size in bytes and timings in seconds."""

    manifest: dict[str, Any]
    size_bytes: int
    timings: dict[str, float] = field(default_factory=dict)
    completed_at: float | None = None
    """Unix time (seconds) of the commit that completed the suspend, when `complete_suspend` asked
    for it; None otherwise (the workflow's own finalize step then runs)."""
    completed_earlier: bool = False
    """An earlier attempt of this call completed the suspend (its answer was lost); `manifest` is
    then empty: the store has the real one."""
    egress_cut: int = 0
    """Outbound connections of the actor (through the node's egress proxy) still open when the
    checkpoint's wait for them ran out, cut for it (0 in results recorded before the field)."""


@dataclass
class AteletTerminateInput:
    """Stop whatever the holder runs on a worker (best effort, idempotent); with `only_own`, only
    a sandbox that this operation's own Run or Restore started (a rollback: if a revert took the
    actor over and it runs again on the same worker, that sandbox is not this one's to stop)."""

    operation_id: str
    worker: WorkerRef
    holder: ActorRef
    only_own: bool = False
