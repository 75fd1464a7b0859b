"""Helpers every ate workflow uses: activity options and the visible current step.

Workflow code only: imports temporalio, the standard library and `workflows.types`.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

DB_OPTIONS = {
    "start_to_close_timeout": timedelta(seconds=15),
    "retry_policy": RetryPolicy(initial_interval=timedelta(milliseconds=50), backoff_coefficient=2.0,
                                maximum_interval=timedelta(seconds=2), maximum_attempts=20),
}
"""Postgres steps: short, retried through a database restart (about half a minute in all)."""

ATELET_OPTIONS = {
    "start_to_close_timeout": timedelta(seconds=120),
    "retry_policy": RetryPolicy(initial_interval=timedelta(milliseconds=200), backoff_coefficient=2.0,
                                maximum_interval=timedelta(seconds=5), maximum_attempts=4),
}
"""atelet calls: restores and checkpoints take up to a few seconds; a few retries, then roll back."""


ACTIVITY_FAILURES = (ActivityError, ApplicationError)
"""What a failed (local) activity raises in a workflow: local activities surface the
activity's own ApplicationError, regular ones wrap it in an ActivityError."""


def show_step(step: str) -> None:
    """Make the workflow's current step visible in the Temporal UI (workflow details)."""
    workflow.set_current_details(f"step: {step}")


def failure_of(error: BaseException) -> ApplicationError:
    """The application failure behind an activity error (its `type` is the store/atelet reason)."""
    cause = error.cause if isinstance(error, ActivityError) else error
    if isinstance(cause, ApplicationError):
        return cause
    return ApplicationError(str(cause or error), type="Internal", non_retryable=True)


def reraise(error: BaseException, prefix: str = "") -> ApplicationError:
    """A non-retryable workflow failure carrying the cause's type, for the API to map."""
    cause = failure_of(error)
    message = f"{prefix}{cause.message}" if prefix else cause.message
    return ApplicationError(message, *cause.details, type=cause.type or "Internal", non_retryable=True)
