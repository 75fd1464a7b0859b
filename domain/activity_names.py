"""The names of ate's Temporal activities: one spelling for the workflows and the worker.

A workflow runs an activity by name (`db_step(Activity.BEGIN_RESUME, ...)`), and the worker
registers the activity under the same member (`@activity_defn(Activity.BEGIN_RESUME)` in
`activities/`), so a misspelling is an `AttributeError` at import, or a type error under mypy
where a step takes an `Activity`, not an activity that never runs.

The values are recorded in every Temporal history (the activity type of each scheduled activity
and local-activity marker): they never change, or runs recorded earlier no longer replay.
"""

from __future__ import annotations

from enum import StrEnum


class Activity(StrEnum):
    """An activity's registered name; the value is its Temporal activity type."""

    # ---- Postgres (activities.db.DbActivities)
    BEGIN_RESUME = "begin_resume"
    """Place and bind: SUSPENDED|PAUSED -> RESUMING on a chosen worker (one transaction)."""
    FINISH_RESUME = "finish_resume"
    """RESUMING -> RUNNING."""
    RESUME_FINISHED = "resume_finished"
    """Whether this operation marked the actor RUNNING already (its answer was lost)."""
    RESUME_PROGRESS = "resume_progress"
    """How far a failed `place_and_restore` got: RUNNING, RESUMING on a worker, or nothing."""
    ROLLBACK_THAW = "rollback_thaw"
    """RESUMING -> FROZEN after a failed thaw (the frozen sandbox and its memory are kept)."""
    ROLLBACK_RESUME = "rollback_resume"
    """RESUMING -> SUSPENDED (or PAUSED) and free the place, recording the error."""
    BEGIN_SUSPEND = "begin_suspend"
    """RUNNING|PAUSED -> SUSPENDING with a PENDING snapshot reserved."""
    COMPLETE_SUSPEND = "complete_suspend"
    """Snapshot COMPLETED, actor SUSPENDED, worker freed."""
    SUSPEND_COMPLETED = "suspend_completed"
    """Whether the suspend already completed with this snapshot (its answer was lost)."""
    ROLLBACK_SUSPEND = "rollback_suspend"
    """Undo a failed checkpoint (-> RUNNING) or upload (-> PAUSED); the PENDING snapshot dropped."""
    BEGIN_PAUSE = "begin_pause"
    """RUNNING -> PAUSING with a PENDING local snapshot reserved on the worker's node."""
    COMPLETE_PAUSE = "complete_pause"
    """Local snapshot COMPLETED, actor PAUSED and pinned to its node, worker freed."""
    DRAIN_ROUTERS = "drain_routers"
    """Before a checkpoint: drain the actor's traffic from every router replica (bounded wait)."""
    BEGIN_UPLOAD = "begin_upload"
    """Reserve the storage-location snapshot an async suspend's local one is uploaded to."""
    COMPLETE_UPLOAD = "complete_upload"
    """The upload landed: it becomes the actor's latest snapshot when the actor still waits for it."""
    ABANDON_UPLOAD = "abandon_upload"
    """Forget the snapshot an upload reserved and will not complete."""
    BEGIN_GOLDEN = "begin_golden"
    """Bind a worker for the template's golden boot and reserve the snapshot."""
    COMPLETE_GOLDEN = "complete_golden"
    """Golden snapshot COMPLETED, template Ready."""
    FAIL_GOLDEN = "fail_golden"
    """Template Failed with the reason; its place released."""
    BEGIN_REVERT = "begin_revert"
    """Mark REVERTING; returns the worker to clean and whether its node is alive."""
    FENCE_WORKER = "fence_worker"
    """Keep a worker out of placement until its atelet reports it idle."""
    FINISH_REVERT = "finish_revert"
    """REVERTING -> SUSPENDED with the last COMPLETED snapshot."""
    BEGIN_DRAIN = "begin_drain"
    """Mark the node draining and list its actors."""
    DRAIN_LEFTOVERS = "drain_leftovers"
    """Actors still bound to the node's workers, or pinned to it."""
    CRASH_AFTER_DEADLINE = "crash_after_deadline"
    """Mark an actor left on a drained node CRASHED (its last COMPLETED snapshot is kept)."""
    GARBAGE_SNAPSHOTS = "garbage_snapshots"
    """A batch of snapshots nothing needs."""
    BEGIN_FREEZE = "begin_freeze"
    """RUNNING -> FROZEN under the operation (the routers stop sending at its NOTIFY)."""
    FINISH_FREEZE = "finish_freeze"
    """The sandbox is stopped: the operation is recorded finished, the actor rests FROZEN."""
    PRESSURE_VICTIMS = "pressure_victims"
    """The opted-in actor whose move makes room for a resume that found none (or an older waiting one)."""
    RELEASE_ROOM = "release_room"
    """Workers kept for a resume whose victims' moves gave way or failed are kept for nobody."""
    LEAVE_ROOM_QUEUE = "leave_room_queue"
    """A resume that stopped waiting for room leaves the queue (and the workers kept for it)."""
    ROLLBACK_FREEZE = "rollback_freeze"
    """FROZEN -> RUNNING: the freeze gave way to traffic or the atelet could not stop the sandbox."""

    # ---- atelet calls (activities.atelet.AteletActivities)
    ATELET_START = "atelet_start"
    """Boot (no snapshot) or restore the holder's workload on a worker; optionally mark it RUNNING."""
    PLACE_AND_RESTORE = "place_and_restore"
    """ResumeActor's placement, restore and RUNNING commit in one activity."""
    ATELET_CHECKPOINT = "atelet_checkpoint"
    """Checkpoint the holder into request.snapshot.uri with its scope; the worker is freed."""
    ATELET_COPY_SNAPSHOT = "atelet_copy_snapshot"
    """Upload a LOCAL snapshot: its node's atelet copies it to the storage location."""
    ATELET_TERMINATE = "atelet_terminate"
    """Stop and delete the holder's sandbox on a worker (idempotent)."""
    ATELET_FREEZE = "atelet_freeze"
    """Stop the holder's sandbox in place (cgroup freezer or a stopped VM; idempotent)."""
    ATELET_EXEC = "atelet_exec"
    """Run a command in the holder's sandbox until it ends (not idempotent: never retried)."""
    BEGIN_EXEC = "begin_exec"
    """The RUNNING actor's worker, and the exec recorded in its history."""
    FINISH_EXEC = "finish_exec"
    """Record how an exec ended in the actor's history."""
    DELETE_SNAPSHOT = "delete_snapshot"
    """Delete a snapshot's data through a live atelet, then its row."""

    # ---- wakes (activities.wake.WakeActivities)
    WAKE_REQUEST = "wake_request"
    """A schedule's request to an actor, sent through the router (which resumes it)."""
