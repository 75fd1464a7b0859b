"""WakeActor: an actor woken by a schedule (`domain.schedules`): one request, `GET <path>`, sent
through the router (`wake_request`), which resumes the actor as for any request. Started by a
Temporal Schedule under the ID `wake/<atespace>/<actor>/<schedule>` (not the actor's lock: the
resume it causes takes that); a failed request is retried (the router parks it while the actor
resumes, and answers 503 when no worker has room).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from workflows.steps import ACTIVITY_FAILURES, counted, reraise, show_step

with workflow.unsafe.imports_passed_through():
    from domain.activity_names import Activity
    from domain.schedules import WakeActorInput, WakeActorResult
    from domain.states import Operation

_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=2.0, maximum_interval=timedelta(seconds=10),
    maximum_attempts=5,
)


@workflow.defn(name=Operation.WAKE.value)
class WakeActorWorkflow:
    """Send one request to an actor through the router."""

    @workflow.run
    async def run(self, request: WakeActorInput) -> WakeActorResult:
        """Wake `request.actor` with `GET request.path`.

        Raises:
            ApplicationError: the router could not be reached or kept answering 5xx after the retries.
        """
        return await counted(Operation.WAKE.value, self._run(request))

    async def _run(self, request: WakeActorInput) -> WakeActorResult:
        show_step(f"GET {request.path} through the router" + (f" ({request.reason})" if request.reason else ""))
        try:
            result: WakeActorResult = await workflow.execute_activity(
                Activity.WAKE_REQUEST.value, request, result_type=WakeActorResult,
                start_to_close_timeout=timedelta(seconds=90), retry_policy=_RETRY,
            )  # fmt: skip
        except ACTIVITY_FAILURES as error:
            raise reraise(error) from error
        show_step(f"done: {result.status}")
        return result
