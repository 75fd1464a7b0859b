"""ResumeActor: SUSPENDED|PAUSED -> RESUMING -> RUNNING (placement, atelet restore, finalize).

Since the patch ONE_ACTIVITY_PATCH the three steps below run in one regular activity,
`place_and_restore` (each part idempotent for this run's ID as operation ID): no workflow task
separates the placement from the restore or the restore from the RUNNING commit whose NOTIFY
answers the resume (bench/README.md, "activation"). When placement finds no room, the pressure
step moves opted-in actors off their workers (`workflows.pressure`); when it cannot now, a resume
asked to wait for room (`room_wait_seconds`, the router's remaining park budget) tries both again
every `ROOM_POLL_SECONDS` until then. When it fails, `resume_progress` tells what
is left: a RESUMING actor on a worker is rolled back as below, a RUNNING one (an attempt whose
answer was lost) is done, and a refused placement left nothing. A PAUSED actor whose node is full
takes the steps one by one after the detach. Runs recorded before the patch replay the steps:
1. placement: `begin_resume` chooses a worker and binds it, marking RESUMING (one transaction).
   A PAUSED actor is placed on the node holding its local snapshot; when that node is full
   and another has room, the local snapshot is first uploaded (`workflows.detach`) and the
   actor placed anywhere.
2. restore: `atelet_start` restores the latest snapshot (or the golden one) onto the worker and
   waits for the wakeup probes.
3. finalize: RESUMING -> RUNNING. Since the patch FINALIZE_IN_RESTORE_PATCH the `atelet_start`
   activity commits it itself as soon as the restore answers (`mark_running`), so the commit's
   NOTIFY, on which the api-server answers the resume, does not wait for the activity's
   completion to travel through the Temporal server and a workflow task (~6 ms; bench/README.md,
   "activation"). The `finish_resume` step runs only when that commit did not happen (Postgres
   was down: the step retries through a restart), and for runs from before the patch. When the
   restore step fails after an attempt committed (its answer was lost), `resume_finished` tells
   the workflow the actor is RUNNING, and it is not rolled back.
If the restore fails for good, the sandbox is terminated and the actor rolled back to
SUSPENDED (PAUSED when it came from there) with its worker freed: never left in RESUMING with a worker held (the reference
system's failure #1665).
"""

from __future__ import annotations

import contextlib
from typing import NoReturn

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from workflows.detach import detach_paused
from workflows.pressure import PRESSURE_PATCH, ROOM_QUEUE_PATCH, make_room
from workflows.steps import (
    atelet_step,
    boot_timeout,
    counted,
    db_step,
    reraise,
    show_step,
)

with workflow.unsafe.imports_passed_through():
    from domain.activity_names import Activity
    from domain.operations.atelet_calls import AteletRunInput, AteletRunResult, AteletTerminateInput
    from domain.operations.common import FinishInput
    from domain.operations.pressure import ROOM_SIGNAL, LeaveRoomQueueInput
    from domain.operations.resume import (
        MAX_ROOM_WAIT_SECONDS,
        ROOM_POLL_SECONDS,
        TIMER_LATENESS_SECONDS,
        BeginResumeInput,
        PlaceAndRestoreInput,
        PlaceAndRestoreResult,
        ResumeActorInput,
        ResumeActorResult,
        ResumePlan,
        ResumeProgress,
    )
    from domain.operations.revert import FenceInput
    from domain.reasons import PLACEMENT_REFUSALS, Reason
    from domain.refs import ActorRef, WorkerRef
    from domain.states import Operation

ONE_ACTIVITY_PATCH = "place-and-restore"
"""The `workflow.patched` ID of the one activity that places, restores and marks RUNNING; runs
recorded before it replay with their steps one by one."""

ALL_PLACEMENT_REFUSALS_PATCH = "all-placement-refusals"
"""The `workflow.patched` ID of raising every placement refusal (`domain.reasons.PLACEMENT_REFUSALS`)
at once. Runs recorded before it looked up the resume's progress after a NoMatchingWorker or an
Unreachable refusal (the list here missed the one and misspelled the other: an extra round trip)
and replay so."""

_REFUSALS_BEFORE_THE_PATCH = frozenset(
    {Reason.NOT_FOUND, Reason.FAILED_PRECONDITION, Reason.NO_CAPACITY, Reason.INVALID_ARGUMENT}
)

FINALIZE_IN_RESTORE_PATCH = "finalize-in-restore"
"""The `workflow.patched` ID of the restore step that marks the actor RUNNING itself; runs recorded
before it replay with their own `finish_resume` step."""


@workflow.defn(name=Operation.RESUME.value)
class ResumeActorWorkflow:
    """Resume one actor; the workflow ID `actor/<atespace>/<name>` is the per-actor lock."""

    def __init__(self) -> None:
        self._room = False

    @workflow.signal(name=ROOM_SIGNAL)
    def room(self) -> None:
        """A pressure move of another resume emptied a worker for this one (the room queue)."""
        self._room = True

    @workflow.run
    async def run(self, request: ResumeActorInput) -> ResumeActorResult:
        """Run the operation, counting it by outcome (see `_run` for what it does)."""
        return await counted(Operation.RESUME.value, self._run(request))

    async def _run(self, request: ResumeActorInput) -> ResumeActorResult:
        """Resume `request.actor`.

        Raises:
            ApplicationError: type NotFound, FailedPrecondition (state), NoCapacity, or the
                atelet's reason when the restore failed (the actor is then SUSPENDED again).
        """
        operation_id = workflow.info().run_id
        timings: dict[str, float] = {}
        if workflow.patched(ONE_ACTIVITY_PATCH):
            return await self._in_one_activity(request, operation_id, timings)
        show_step("placement")
        started = workflow.time()
        try:
            plan = await self._place(request.actor, operation_id)
        except ApplicationError as error:
            if error.type != Reason.PINNED_NODE_FULL:
                raise
            return await self._after_detach(request, operation_id, timings, started, None)
        timings["placement"] = workflow.time() - started
        if plan.already_running:
            return ResumeActorResult(actor=request.actor, worker=plan.worker, already_running=True, timings=timings)
        return await self._restore(request, operation_id, plan, timings, None)

    async def _in_one_activity(
        self, request: ResumeActorInput, operation_id: str, timings: dict[str, float]
    ) -> ResumeActorResult:
        """Placement, restore and finalize in `place_and_restore` (module doc); when placement
        finds no room, the pressure step moves opted-in actors off their workers and tries again
        (`workflows.pressure`)."""
        actor = request.actor
        show_step("placement and restore")
        started = workflow.time()
        room_deadline = started + min(request.room_wait_seconds, MAX_ROOM_WAIT_SECONDS)
        tried: list[ActorRef] = []
        queued = False  # whether this run joined the room queue (the queue's pressure_victims call)
        while True:
            try:
                done: PlaceAndRestoreResult = await atelet_step(
                    Activity.PLACE_AND_RESTORE,
                    PlaceAndRestoreInput(
                        actor=actor,
                        operation_id=operation_id,
                        probe_timeout_seconds=request.probe_timeout_seconds,
                        waited_for_room=queued,
                    ),
                    result_type=PlaceAndRestoreResult,
                    timeout=boot_timeout(request.probe_timeout_seconds),
                )
                break
            except ApplicationError as error:
                if error.type != Reason.NO_CAPACITY or not workflow.patched(PRESSURE_PATCH):
                    await self._leave_room_queue(actor, queued)
                    return await self._not_placed(request, operation_id, timings, started, error)
                queued = queued or workflow.patched(ROOM_QUEUE_PATCH)
                moved = await make_room(actor, tried, operation_id)
                if moved is None:
                    left = room_deadline - workflow.time() - TIMER_LATENESS_SECONDS
                    if left <= 0:  # a timer set now might fire after the deadline
                        await self._leave_room_queue(actor, queued)
                        return await self._not_placed(request, operation_id, timings, started, error)
                    if not self._room:  # told since the last try: a worker is kept for it already
                        show_step(f"waiting for room ({left:.1f} s left)")
                        with contextlib.suppress(TimeoutError):
                            await workflow.wait_condition(lambda: self._room, timeout=min(ROOM_POLL_SECONDS, left))
                    self._room = False
                    tried.clear()  # an actor that gave way to a request may be idle now
                    continue
                timings["pressure"] = workflow.time() - started
                show_step(f"placement and restore (moved {moved.key} to make room)")
        plan = done.plan
        timings["placement"] = done.placement_seconds
        if plan.already_running and not done.resumed_earlier:
            return ResumeActorResult(actor=actor, worker=plan.worker, already_running=True, timings=timings)
        return await self._finish(actor, operation_id, plan, done.restored, timings, started)

    async def _leave_room_queue(self, actor: ActorRef, queued: bool) -> None:
        """A resume that joined the room queue and stops waiting leaves it (and the workers kept
        for it), so that no move empties a worker for it in vain."""
        if queued:
            await db_step(Activity.LEAVE_ROOM_QUEUE, LeaveRoomQueueInput(actor=actor))

    async def _not_placed(
        self,
        request: ResumeActorInput,
        operation_id: str,
        timings: dict[str, float],
        started: float,
        error: ApplicationError,
    ) -> ResumeActorResult:
        """`place_and_restore` failed: a full pinned node detaches, a refusal is raised, anything
        else is looked up (`resume_progress`) and rolled back or taken as done."""
        actor = request.actor
        if error.type == Reason.PINNED_NODE_FULL:
            return await self._after_detach(request, operation_id, timings, started, True)
        if _placement_refused(error) or error.type == Reason.SUPERSEDED:
            raise error
        finish = FinishInput(actor=actor, operation_id=operation_id)
        progress = await db_step(Activity.RESUME_PROGRESS, finish, result_type=ResumeProgress)
        if progress.running:  # an attempt restored and marked it RUNNING; its answer was lost
            timings["atelet"] = workflow.time() - started
            show_step("done")
            return ResumeActorResult(actor=actor, worker=progress.worker, timings=timings)
        if progress.thaw:  # the frozen sandbox holds the actor's memory: keep it, FROZEN again
            show_step("rollback to FROZEN")
            await db_step(Activity.ROLLBACK_THAW, FinishInput(actor=actor, operation_id=operation_id, error=error.message))
            raise error
        if progress.worker is not None:
            await self._roll_back(progress.worker, actor, operation_id, error)
        raise error

    async def _place(self, actor: ActorRef, operation_id: str) -> ResumePlan:
        """The placement step, `begin_resume` (a local activity)."""
        plan: ResumePlan = await db_step(
            Activity.BEGIN_RESUME, BeginResumeInput(actor=actor, operation_id=operation_id), result_type=ResumePlan
        )
        return plan

    async def _after_detach(
        self,
        request: ResumeActorInput,
        operation_id: str,
        timings: dict[str, float],
        started: float,
        mark_running: bool | None,
    ) -> ResumeActorResult:
        """A PAUSED actor whose node is full: upload its local snapshot (`workflows.detach`), then
        place it anywhere and restore it step by step."""
        await detach_paused(request.actor, operation_id)
        timings["detach"] = workflow.time() - started
        show_step("placement after detach")
        plan = await self._place(request.actor, operation_id)
        timings["placement"] = workflow.time() - started
        if plan.already_running:
            return ResumeActorResult(actor=request.actor, worker=plan.worker, already_running=True, timings=timings)
        return await self._restore(request, operation_id, plan, timings, mark_running)

    async def _restore(
        self,
        request: ResumeActorInput,
        operation_id: str,
        plan: ResumePlan,
        timings: dict[str, float],
        mark_running: bool | None,
    ) -> ResumeActorResult:
        """The restore step, `atelet_start` (marking RUNNING itself when `mark_running`; None:
        when FINALIZE_IN_RESTORE_PATCH says so, asked here as the runs before ONE_ACTIVITY_PATCH
        did), then the finalize; a restore that fails for good is rolled back."""
        actor = request.actor
        assert plan.worker is not None and plan.spec is not None
        show_step(f"restore on worker {plan.worker.pool}/{plan.worker.name} ({plan.worker.node})")
        started = workflow.time()
        if mark_running is None:
            mark_running = workflow.patched(FINALIZE_IN_RESTORE_PATCH)
        restored: AteletRunResult | None
        try:
            restored = await atelet_step(
                Activity.ATELET_START,
                AteletRunInput(
                    operation_id=operation_id,
                    worker=plan.worker,
                    holder=actor,
                    spec=plan.spec,
                    snapshot=plan.snapshot,
                    probe_timeout_seconds=request.probe_timeout_seconds,
                    mark_running=mark_running,
                    template=plan.template,
                ),
                result_type=AteletRunResult,
                timeout=boot_timeout(request.probe_timeout_seconds),
            )
        except ApplicationError as error:
            if error.type == Reason.SUPERSEDED:  # a revert took the actor over: nothing here is ours to undo
                raise
            finish = FinishInput(actor=actor, operation_id=operation_id)
            if not (mark_running and await db_step(Activity.RESUME_FINISHED, finish, result_type=bool)):
                await self._roll_back(plan.worker, actor, operation_id, error)
            restored = None  # an attempt marked the actor RUNNING and its answer was lost: done
        return await self._finish(actor, operation_id, plan, restored, timings, started)

    async def _finish(
        self,
        actor: ActorRef,
        operation_id: str,
        plan: ResumePlan,
        restored: AteletRunResult | None,
        timings: dict[str, float],
        started: float,
    ) -> ResumeActorResult:
        """Record the restore's timings and run the `finish_resume` step unless the restore's
        activity marked the actor RUNNING itself (or an earlier attempt did: `restored` None)."""
        timings["atelet"] = workflow.time() - started
        if restored is not None:
            timings.update({f"atelet_{k}": v for k, v in restored.timings.items()})
        if restored is not None and restored.marked_running_at is None:
            show_step("finalize")
            started = workflow.time()
            await db_step(Activity.FINISH_RESUME, FinishInput(actor=actor, operation_id=operation_id))
            timings["finalize"] = workflow.time() - started
        show_step("done")
        return ResumeActorResult(
            actor=actor,
            worker=plan.worker,
            restored_generation=plan.snapshot.generation if plan.snapshot else None,
            timings=timings,
            snapshot_cache_hit=restored.snapshot_cache_hit if restored is not None else False,
        )

    async def _roll_back(
        self, worker: WorkerRef, actor: ActorRef, operation_id: str, error: ApplicationError
    ) -> NoReturn:
        """Undo a resume whose restore failed for good: terminate the sandbox (or fence the
        worker when that fails), then RESUMING -> SUSPENDED (or PAUSED) with the worker freed.

        Raises:
            ApplicationError: always: `error`'s type, its message prefixed with what happened.
        """
        show_step("rollback")
        try:
            await atelet_step(
                Activity.ATELET_TERMINATE,
                AteletTerminateInput(operation_id=operation_id, worker=worker, holder=actor, only_own=True),
                result_type=bool,
            )
        except ApplicationError:
            # The sandbox may still be there: keep the worker out of placement until its
            # atelet reports it idle (or is told to stop the stray at its next heartbeat).
            await db_step(
                Activity.FENCE_WORKER,
                FenceInput(
                    worker_id=worker.worker_id,
                    reason=f"fenced: terminate of {actor.key} failed after a failed restore",
                ),
            )
        await db_step(Activity.ROLLBACK_RESUME, FinishInput(actor=actor, operation_id=operation_id, error=error.message))
        raise reraise(error, f"resume of actor {actor.key} failed and was rolled back: ") from error


def _placement_refused(error: ApplicationError) -> bool:
    """Whether `place_and_restore` failed in its placement, before anything was bound (nothing
    to look up or roll back); as runs before ALL_PLACEMENT_REFUSALS_PATCH decided, on replay."""
    if error.type in _REFUSALS_BEFORE_THE_PATCH:
        return True
    return error.type in PLACEMENT_REFUSALS and workflow.patched(ALL_PLACEMENT_REFUSALS_PATCH)
