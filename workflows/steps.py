"""Helpers every ate workflow uses: activity options and the visible current step.

Workflow code only: imports temporalio, the standard library and `domain`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import TimeoutError as ActivityTimeout

with workflow.unsafe.imports_passed_through():
    from domain.activity_names import Activity
    from domain.operations.atelet_calls import AteletCheckpointResult
    from domain.operations.router_drain import MAX_DRAIN_WAIT_SECONDS, RouterDrainInput, RouterDrainResult
    from domain.operations.suspend import CompleteSnapshotInput
    from domain.reasons import Reason
    from domain.refs import ActorRef

T = TypeVar("T")

_DB_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=50),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=2),
    maximum_attempts=20,
)
_ATELET_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=5),
    maximum_attempts=4,
)


async def db_step(activity: Activity, argument: Any, result_type: type[T] | None = None) -> T:
    """Run a Postgres activity locally: short, retried through a database restart (~30 s in all).

    Raises:
        ApplicationError: the step failed for good, in the user's terms (see `failure_of`).
    """
    try:
        result: T = await workflow.execute_local_activity(
            activity.value,
            argument,
            result_type=result_type,
            start_to_close_timeout=timedelta(seconds=15),
            retry_policy=_DB_RETRY,
        )
    except ACTIVITY_FAILURES as error:
        raise reraise(error) from error
    return result


ATELET_HEARTBEAT_TIMEOUT = timedelta(seconds=5)
"""An atelet activity that sends no heartbeat for this long (its worker died) is retried elsewhere."""

ATELET_CALL_TIMEOUT = timedelta(minutes=30)
"""The longest an atelet call may take (a large snapshot's upload); liveness is the heartbeat's job."""


BOOT_MARGIN_SECONDS = 120.0
"""What a boot or restore may take beyond its wakeup probe's timeout (fetch, restore, start)."""


def boot_timeout(probe_timeout_seconds: float) -> timedelta:
    """The start-to-close bound of a Run or Restore call: its probe timeout plus BOOT_MARGIN_SECONDS."""
    return timedelta(seconds=probe_timeout_seconds + BOOT_MARGIN_SECONDS)


async def atelet_step(
    activity: Activity, argument: Any, result_type: type[T] | None = None, *, timeout: timedelta = ATELET_CALL_TIMEOUT
) -> T:
    """Run an atelet activity as a regular activity that heartbeats while the call runs: restores
    and checkpoints take seconds, so they must not hold the workflow task; a few retries of
    what may pass (an atelet restarting), none of what cannot (a refused request, a workload
    whose wakeup probe never answered).

    Args:
        timeout: start-to-close bound of one attempt (a boot: its probe timeout plus margin).

    Raises:
        ApplicationError: the call failed for good, in the user's terms (see `failure_of`).
    """
    try:
        result: T = await workflow.execute_activity(
            activity.value,
            argument,
            result_type=result_type,
            start_to_close_timeout=timeout,
            heartbeat_timeout=ATELET_HEARTBEAT_TIMEOUT,
            retry_policy=_ATELET_RETRY,
        )
    except ACTIVITY_FAILURES as error:
        raise reraise(error) from error
    return result


ROUTER_DRAIN_PATCH = "router-drain"
"""The `workflow.patched` ID of the drain step: runs recorded before it replay without it."""


REVERT_ROUTER_DRAIN_PATCH = "revert-router-drain"
"""The `workflow.patched` ID of RevertActor's drain step (runs recorded before it replay without it)."""

REVERT_DRAIN_MAX_SECONDS = 15.0
"""How long a revert waits for the routers' acknowledgements at most (its sandbox is stopped
already, so requests in flight to it are failing; the API waits 60 s for a revert)."""


async def drain_routers(
    actor: ActorRef,
    operation_id: str,
    patch: str = ROUTER_DRAIN_PATCH,
    max_wait_seconds: float | None = None,
    *,
    if_idle: bool = False,
) -> RouterDrainResult | None:
    """`drain_routers` before a checkpoint (or before a revert frees the worker): every live
    router replica stops sending the actor new requests, lets those in flight finish (or cuts
    them at its drain timeout) and closes its connections to the worker. A local activity that
    waits at most `MAX_DRAIN_WAIT_SECONDS` (domain.operations.router_drain); None for a run from
    before this step (replay; `patch` is the step's `workflow.patched` ID). `max_wait_seconds`
    bounds the wait below the usual bound. With `if_idle` (an idle action, a pressure suspend) a
    replica with a request in flight answers busy instead (`RouterDrainResult.busy`): the caller
    gives way.

    Raises:
        ApplicationError: the step failed for good (the database stayed down), in the user's terms.
    """
    if not workflow.patched(patch):
        return None
    show_step("drain the routers")
    try:
        result: RouterDrainResult = await workflow.execute_local_activity(
            Activity.DRAIN_ROUTERS.value,
            RouterDrainInput(
                actor=actor, operation_id=operation_id, max_wait_seconds=max_wait_seconds, if_idle=if_idle
            ),
            result_type=RouterDrainResult,
            start_to_close_timeout=timedelta(seconds=MAX_DRAIN_WAIT_SECONDS + 30),
            retry_policy=_DB_RETRY,
        )
    except ACTIVITY_FAILURES as error:
        raise reraise(error) from error
    return result


ACTIVITY_FAILURES = (ActivityError, ApplicationError)
"""What a failed activity raises: local activities surface the activity's own ApplicationError,
regular ones wrap it in an ActivityError. `db_step` and `atelet_step` turn both into one
ApplicationError (`reraise`), so a workflow catches ApplicationError."""


def show_step(step: str) -> None:
    """Make the workflow's current step visible in the Temporal UI (workflow details)."""
    workflow.set_current_details(f"step: {step}")


def failure_of(error: BaseException) -> ApplicationError:
    """The application failure behind an activity error: its `type` is the store or atelet
    reason, or `Timeout` for a step that got no answer in time."""
    cause = error.cause if isinstance(error, ActivityError) else error
    if isinstance(cause, ApplicationError):
        return cause
    if isinstance(cause, ActivityTimeout) and isinstance(error, ActivityError):
        kind = cause.type.name.lower().replace("_", "-") if cause.type is not None else "a"
        return ApplicationError(
            f"the step {error.activity_type} got no answer in time ({kind} timeout)", type=Reason.TIMEOUT, non_retryable=True
        )
    return ApplicationError(str(cause or error), type=Reason.INTERNAL, non_retryable=True)


def reraise(error: BaseException, prefix: str = "") -> ApplicationError:
    """A non-retryable workflow failure carrying the cause's type, for the API to map."""
    cause = failure_of(error)
    message = f"{prefix}{cause.message}" if prefix else cause.message
    return ApplicationError(message, *cause.details, type=cause.type or Reason.INTERNAL, non_retryable=True)


def record_operation(operation: str, outcome: str, started: float) -> None:
    """Count one finished operation and its duration (seconds) by operation and outcome.

    Emitted through the workflow metric meter, so replays do not count twice; the worker
    exports them on its Prometheus endpoint as `ate_operations_total` and
    `ate_operation_duration_seconds`.
    """
    meter = workflow.metric_meter()
    attributes = {"operation": operation, "outcome": outcome}
    meter.create_counter("ate_operations", "Operations finished, by operation and outcome").add(1, attributes)
    meter.create_histogram_float(
        "ate_operation_duration_seconds", "Operation duration from workflow start, by operation and outcome", unit="s"
    ).record(max(workflow.time() - started, 0.0), attributes)


def outcome_of(error: BaseException) -> str:
    """The outcome label of a failed operation: the failure's type (NoCapacity, ...)."""
    return failure_of(error).type or Reason.INTERNAL


async def counted(operation: str, body: Awaitable[T], outcome: Callable[[T], str] = lambda _: "ok") -> T:
    """Await a workflow's body and record its outcome and duration (see `record_operation`)."""
    started = workflow.time()
    try:
        result = await body
    except ApplicationError as error:
        record_operation(operation, outcome_of(error), started)
        raise
    record_operation(operation, outcome(result), started)
    return result


async def drop_snapshot(
    actor: ActorRef, operation_id: str, snapshot_id: int, error: str, *, abandoned: bool = False
) -> None:
    """`rollback_suspend`: a checkpoint or upload failed for good, or (`abandoned`) an idle or
    pressure operation gave way to traffic; the actor goes back to the state the operation
    started from and the PENDING snapshot row is dropped, `error` recorded."""
    await db_step(
        Activity.ROLLBACK_SUSPEND,
        CompleteSnapshotInput(
            actor=actor, operation_id=operation_id, snapshot_id=snapshot_id, manifest={"error": error}, size_bytes=0,
            abandoned=abandoned,
        ),
    )  # fmt: skip


async def settle_snapshot(
    activity: Activity, actor: ActorRef, operation_id: str, snapshot_id: int, done: AteletCheckpointResult
) -> None:
    """`complete_suspend` / `complete_pause`: the snapshot COMPLETED with the manifest the atelet
    wrote (never without it), the actor in its resting state; a failure is re-raised for the API."""
    await db_step(
        activity,
        CompleteSnapshotInput(
            actor=actor,
            operation_id=operation_id,
            snapshot_id=snapshot_id,
            manifest=done.manifest,
            size_bytes=done.size_bytes,
        ),
    )
