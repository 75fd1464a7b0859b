"""/v1/atespaces/{atespace}/actors/{name}/schedules: an actor's schedules (create, list, delete),
each a Temporal Schedule that wakes the actor with a request through the router
(`domain.schedules`, `workflows/wake_actor.py`). Temporal keeps them: they are visible and
pausable in its UI, survive restarts, and catch up missed times as each one says.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi import APIRouter, Response
from pydantic import BaseModel, Field
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
)
from temporalio.service import RPCError, RPCStatusCode

from api.access.guard import needs
from api.deps import StoreDep, TemporalDep
from api.errors import ApiError, InvalidArgument
from api.operations import search_attributes
from api.strict import Strict
from domain.access import Permission
from domain.reasons import Reason
from domain.refs import ActorRef
from domain.schedules import (
    CATCHUP_WINDOW_SECONDS,
    ActorSchedule,
    Catchup,
    ScheduleError,
    WakeActorInput,
    check_schedule,
    schedule_prefix,
)
from domain.states import Operation
from domain.temporal import TASK_QUEUE, WORKFLOW_TASK_TIMEOUT

router = APIRouter(tags=["schedules"])
PREFIX = "/v1/atespaces/{atespace}/actors/{name}/schedules"

SKIP_WINDOW = timedelta(seconds=10)
"""Catchup Skip: Temporal's shortest catch-up window (a time missed by more is dropped)."""


class ScheduleCreate(Strict):
    """POST body of a schedule: exactly one of `cron` and `every_seconds`."""

    name: str = Field(description="a DNS-1123 label, unique per actor")
    cron: str | None = Field(default=None, description="five fields: minute hour day-of-month month day-of-week")
    every_seconds: int | None = Field(default=None, ge=1, le=366 * 24 * 3600)
    time_zone: str = Field(default="UTC", description="IANA time zone the cron expression is read in")
    path: str = Field(default="/", description="the request's path (and query), sent through the router")
    catchup: Catchup = Field(
        default=Catchup.SKIP,
        description="times missed while the control plane was down: Skip (dropped), One (one wake for all), All "
        "(one wake each)",
    )


class SchedulePublic(BaseModel):
    """A schedule as the API shows it."""

    name: str
    actor: str
    cron: str | None
    every_seconds: int | None
    time_zone: str
    path: str
    catchup: str
    paused: bool
    next_times: list[str]
    recent_wakes: int


class ScheduleList(BaseModel):
    """The schedules of one actor."""

    items: list[SchedulePublic]


def _temporal_schedule(schedule: ActorSchedule) -> Schedule:
    every = [ScheduleIntervalSpec(every=timedelta(seconds=schedule.every_seconds))] if schedule.every_seconds else []
    catch_all = schedule.catchup is not Catchup.SKIP
    overlap = {Catchup.ALL: ScheduleOverlapPolicy.BUFFER_ALL, Catchup.ONE: ScheduleOverlapPolicy.BUFFER_ONE}.get(
        schedule.catchup, ScheduleOverlapPolicy.SKIP
    )
    reason = f"schedule {schedule.name}"
    return Schedule(
        action=ScheduleActionStartWorkflow(
            Operation.WAKE.value,
            WakeActorInput(actor=schedule.actor, path=schedule.path, reason=reason),
            id=schedule.workflow_id,
            task_queue=TASK_QUEUE,
            task_timeout=WORKFLOW_TASK_TIMEOUT,
            typed_search_attributes=search_attributes(schedule.actor.atespace, schedule.actor.name, Operation.WAKE),
        ),
        spec=ScheduleSpec(
            cron_expressions=[schedule.cron] if schedule.cron else [],
            intervals=every,
            time_zone_name=schedule.time_zone,
        ),
        policy=SchedulePolicy(
            overlap=overlap,
            catchup_window=timedelta(seconds=CATCHUP_WINDOW_SECONDS) if catch_all else SKIP_WINDOW,
        ),
    )


@router.post(PREFIX, status_code=201, **needs(Permission.ACTORS_MANAGE))
async def create_schedule(
    atespace: str, name: str, body: ScheduleCreate, store: StoreDep, temporal: TemporalDep
) -> SchedulePublic:
    """Give the actor a schedule: at each time, `GET path` is sent to it through the router (which
    resumes it); its idle policy takes it down again after."""
    ref = ActorRef(atespace, name)
    await store.actors.get(ref)  # 404 before anything is made
    try:
        schedule = check_schedule(
            ref, body.name, path=body.path, cron=body.cron, every_seconds=body.every_seconds,
            time_zone=body.time_zone, catchup=body.catchup.value,
        )  # fmt: skip
    except ScheduleError as error:
        raise InvalidArgument(f"invalid request: {error}", {"field": error.field}) from None
    try:
        await temporal.create_schedule(
            schedule.schedule_id, _temporal_schedule(schedule), memo={"cron": schedule.cron} if schedule.cron else None
        )
    except ScheduleAlreadyRunningError:
        raise ApiError(
            f"actor {ref.key} already has a schedule named {schedule.name}; delete it first",
            {"schedule": schedule.name}, reason=Reason.ALREADY_EXISTS,
        ) from None  # fmt: skip
    except RPCError as error:
        if error.status == RPCStatusCode.INVALID_ARGUMENT:  # a cron Temporal does not read
            raise InvalidArgument(f"invalid request: cron: {error.message}", {"field": "cron"}) from None
        raise
    return await _view(temporal, schedule.schedule_id)


@router.get(PREFIX, **needs(Permission.ACTORS_READ))
async def list_schedules(atespace: str, name: str, store: StoreDep, temporal: TemporalDep) -> ScheduleList:
    """The actor's schedules, with their next times and how many wakes they started recently."""
    ref = ActorRef(atespace, name)
    await store.actors.get(ref)
    return ScheduleList(items=[await _view(temporal, schedule_id) for schedule_id in sorted(await _ids(temporal, ref))])


@router.delete(PREFIX + "/{schedule}", status_code=204, **needs(Permission.ACTORS_MANAGE))
async def delete_schedule(atespace: str, name: str, schedule: str, temporal: TemporalDep) -> Response:
    """Delete one schedule of the actor (wakes it already started run to their end)."""
    ref = ActorRef(atespace, name)
    await _delete(temporal, f"{schedule_prefix(ref)}{schedule}", f"actor {ref.key} has no schedule named {schedule}")
    return Response(status_code=204)


async def delete_all(temporal: Client, ref: ActorRef) -> int:
    """Delete every schedule of `ref` (its delete); returns how many there were."""
    ids = await _ids(temporal, ref)
    for schedule_id in ids:
        await _delete(temporal, schedule_id, "")
    return len(ids)


async def _ids(temporal: Client, ref: ActorRef) -> list[str]:
    """The IDs of `ref`'s schedules, as Temporal's visibility lists them (it lags a little)."""
    prefix = schedule_prefix(ref)
    return [s.id async for s in await temporal.list_schedules() if s.id.startswith(prefix)]


async def _delete(temporal: Client, schedule_id: str, missing: str) -> None:
    try:
        await temporal.get_schedule_handle(schedule_id).delete()
    except RPCError as error:
        if error.status != RPCStatusCode.NOT_FOUND:
            raise
        if missing:
            raise ApiError(missing, {"schedule": schedule_id.rsplit("/", 1)[-1]}, reason=Reason.NOT_FOUND) from None


async def _view(temporal: Client, schedule_id: str) -> SchedulePublic:
    described = await temporal.get_schedule_handle(schedule_id).describe()
    spec = described.schedule.spec
    action: Any = described.schedule.action
    _, atespace, actor, name = schedule_id.split("/", 3)
    policy = described.schedule.policy
    catchup = (
        Catchup.SKIP if (policy.catchup_window or SKIP_WINDOW) <= SKIP_WINDOW
        else Catchup.ALL if policy.overlap == ScheduleOverlapPolicy.BUFFER_ALL else Catchup.ONE
    )  # fmt: skip
    [wake] = await temporal.data_converter.decode(action.args, [WakeActorInput]) if action.args else [None]
    path = wake.path if isinstance(wake, WakeActorInput) else "/"
    return SchedulePublic(
        name=name,
        actor=f"{atespace}/{actor}",
        cron=await described.memo_value("cron", None),  # Temporal keeps a cron only as calendars
        every_seconds=int(spec.intervals[0].every.total_seconds()) if spec.intervals else None,
        time_zone=spec.time_zone_name or "UTC",
        path=path,
        catchup=catchup.value,
        paused=described.schedule.state.paused,
        next_times=[t.isoformat() for t in described.info.next_action_times[:3]],
        recent_wakes=described.info.num_actions,
    )
