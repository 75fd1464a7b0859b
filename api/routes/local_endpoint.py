"""/v1/nodes/{node}/workers/{worker}/actors/{atespace}/{name}: what an actor asks of ate from
inside its sandbox, relayed by its node's atelet (`domain.local_endpoint`, `atelet.local_endpoint`).

Only a node's own credentials reach these routes (permission `nodes:register` on `{node}`), and
each acts only when `{worker}` of `{node}` holds the actor now: a node cannot act on an actor
placed elsewhere, and a call that raced the actor's departure is refused, changing nothing.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from fastapi import APIRouter, Body, Request, Response
from pydantic import BaseModel, Field
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from api.access.guard import PermissionDenied, needs
from api.deps import StoreDep, TemporalDep
from api.egress import policy_for_node
from api.errors import ApiError, InvalidArgument, OperationInProgress
from api.operations import search_attributes
from api.schemas import ActorPublic
from api.strict import Strict
from api.views import actor_view
from domain.access import Permission
from domain.idle import IdlePolicy, PolicyError, parse_idle_policy
from domain.local_endpoint import (
    MAX_LINGER_SECONDS,
    MAX_WAKES_PER_ACTOR,
    AskedWake,
    LocalEndpointError,
    asked_wake_prefix,
    check_wake,
    self_suspend_reason,
)
from domain.operations.pause import PauseActorInput
from domain.operations.suspend import SuspendActorInput
from domain.reasons import Reason
from domain.refs import ActorRef
from domain.schedules import WakeActorInput
from domain.states import ActorState, Operation
from domain.temporal import TASK_QUEUE, WORKFLOW_TASK_TIMEOUT
from store.records import ActorRecord

router = APIRouter(tags=["local endpoint"])
PREFIX = "/v1/nodes/{node}/workers/{worker}/actors/{atespace}/{name}"


class SelfSuspend(Strict):
    """POST body of an actor's own suspend (or pause)."""

    action: Literal["Suspend", "Pause"] = Field(
        default="Suspend",
        description="Suspend (a snapshot in the storage location) or Pause (a local snapshot on its node)",
    )
    linger_seconds: float = Field(
        default=0.0,
        ge=0,
        le=MAX_LINGER_SECONDS,
        description="how long to keep running first; answers in flight are sent either way",
    )


class SelfSuspendAccepted(BaseModel):
    """The answer to an actor's own suspend: its workflow, which starts at `starts_at`."""

    operation: str
    workflow_id: str
    starts_at: datetime


class WakeCreate(Strict):
    """POST body of a wake the actor asks for: exactly one of `after_seconds` and `at`."""

    name: str | None = Field(
        default=None, description="a DNS-1123 label, unique among its pending wakes; default: a random one"
    )
    after_seconds: float | None = Field(default=None, description="seconds from now")
    at: str | None = Field(default=None, description="an ISO 8601 time with a zone, e.g. 2026-12-24T18:00:00Z")
    path: str = Field(default="/", description="the path (and query) of the GET request the wake sends")


class WakePublic(BaseModel):
    """A pending wake: `GET path` through the router at `at`."""

    name: str
    actor: str
    at: datetime
    path: str


class WakeList(BaseModel):
    """An actor's pending wakes, soonest first."""

    items: list[WakePublic]


async def _held(store: StoreDep, node: str, worker: str, atespace: str, name: str) -> ActorRecord:
    """The actor, when `worker` of `node` holds it now.

    Raises:
        NotFound: no such actor.
        PermissionDenied: the actor is not (or no longer) on that worker.
    """
    actor = await store.actors.get(ActorRef(atespace, name))
    bound = actor.worker
    if bound is None or bound.node != node or bound.name != worker:
        where = f"worker {bound.name} of node {bound.node}" if bound else f"no worker ({actor.state})"
        raise PermissionDenied(
            f"worker {worker} of node {node} does not hold actor {atespace}/{name} (it is on {where}); "
            "the local endpoint acts only for the actor running on the calling worker",
            {"node": node, "worker": worker, "actor": f"{atespace}/{name}"},
        )
    return actor


@router.get(PREFIX + "/egress", **needs(Permission.NODES_REGISTER))
async def egress_for_node(
    node: str, worker: str, atespace: str, name: str, store: StoreDep, request: Request
) -> dict[str, Any]:
    """What the node's egress proxy applies to the actor on its worker (`api.egress.policy_for_node`):
    its policy in force, with the values of its credentials' secrets. Only the node holding the
    actor gets it (403 otherwise); the values are never logged nor kept by the API."""
    actor = await _held(store, node, worker, atespace, name)
    return await policy_for_node(store, getattr(request.app.state, "secret_box", None), actor)


@router.get(PREFIX, **needs(Permission.NODES_REGISTER))
async def who_am_i(node: str, worker: str, atespace: str, name: str, store: StoreDep) -> ActorPublic:
    """The calling actor as the API shows it (state, idle policy, time idle, next idle step)."""
    return actor_view(await _held(store, node, worker, atespace, name))


@router.post(PREFIX + "/suspend", status_code=202, **needs(Permission.NODES_REGISTER))
async def suspend_self(
    node: str, worker: str, atespace: str, name: str, store: StoreDep, temporal: TemporalDep,
    body: SelfSuspend | None = None,
) -> SelfSuspendAccepted:  # fmt: skip
    """Suspend (or pause) the calling actor once `linger_seconds` have passed: a SuspendActor (or
    PauseActor) workflow under the actor's lock, started with that delay, reason `asked by the
    actor`. Its drain lets the answers in flight finish (the one that asked among them), so the
    answer here comes at once. 409 when another operation holds the actor."""
    body = body or SelfSuspend()
    actor = await _held(store, node, worker, atespace, name)
    if actor.state not in (ActorState.RUNNING.value, ActorState.FROZEN.value):
        raise ApiError(f"actor {atespace}/{name} is {actor.state}; only a RUNNING actor can suspend itself",
                       {"state": actor.state}, reason=Reason.FAILED_PRECONDITION)  # fmt: skip
    ref = ActorRef(atespace, name)
    reason = self_suspend_reason(body.linger_seconds)
    operation = Operation.PAUSE if body.action == "Pause" else Operation.SUSPEND
    argument: Any = (
        PauseActorInput(actor=ref, reason=reason) if operation is Operation.PAUSE
        else SuspendActorInput(actor=ref, reason=reason)
    )  # fmt: skip
    delay = timedelta(seconds=body.linger_seconds)
    try:
        await temporal.start_workflow(
            operation.value, argument, id=ref.workflow_id, task_queue=TASK_QUEUE,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL, task_timeout=WORKFLOW_TASK_TIMEOUT,
            search_attributes=search_attributes(atespace, name, operation),
            execution_timeout=timedelta(minutes=30) + delay, start_delay=delay if body.linger_seconds else None,
        )  # fmt: skip
    except WorkflowAlreadyStartedError:
        raise OperationInProgress(
            f"another operation holds actor {atespace}/{name}; ask again once it is done",
            {"actor": f"{atespace}/{name}", "workflow_id": ref.workflow_id},
        ) from None
    return SelfSuspendAccepted(operation=operation.value, workflow_id=ref.workflow_id,
                               starts_at=datetime.now(UTC) + delay)  # fmt: skip


@router.put(PREFIX + "/idle", **needs(Permission.NODES_REGISTER))
async def set_own_idle_policy(
    node: str, worker: str, atespace: str, name: str, store: StoreDep, policy: Any = Body(...)
) -> ActorPublic:
    """Set the calling actor's own idle policy (the body, as `idle` of a template: one step or a
    list; [] turns idleness off for it)."""
    await _held(store, node, worker, atespace, name)
    ref = ActorRef(atespace, name)
    parsed = _policy(policy)
    await store.idleness.set_policy(ref, parsed)
    return actor_view(await store.actors.get(ref))


@router.delete(PREFIX + "/idle", **needs(Permission.NODES_REGISTER))
async def clear_own_idle_policy(node: str, worker: str, atespace: str, name: str, store: StoreDep) -> ActorPublic:
    """Clear the calling actor's own idle policy: its template's applies again."""
    await _held(store, node, worker, atespace, name)
    ref = ActorRef(atespace, name)
    await store.idleness.set_policy(ref, None)
    return actor_view(await store.actors.get(ref))


def _policy(value: Any) -> IdlePolicy:
    """`value` as an idle policy; a bad one is refused naming where it is wrong (`idle[1].action`)."""
    try:
        return parse_idle_policy(value)
    except PolicyError as error:
        raise InvalidArgument(f"invalid request: {error}", {"field": str(error).split(":", 1)[0]}) from None


@router.post(PREFIX + "/wakes", status_code=201, **needs(Permission.NODES_REGISTER))
async def ask_for_wake(
    node: str, worker: str, atespace: str, name: str, body: WakeCreate, store: StoreDep, temporal: TemporalDep
) -> WakePublic:
    """Wake the calling actor later with `GET path` through the router (which resumes it): a
    WakeActor workflow started with a delay. Temporal keeps it, so it outlives the actor's
    suspend, restarts of the control plane and the loss of the actor's node."""
    await _held(store, node, worker, atespace, name)
    ref = ActorRef(atespace, name)
    try:
        wake = check_wake(ref, body.name or f"wake-{secrets.token_hex(4)}", path=body.path,
                          after_seconds=body.after_seconds, at=body.at, now=datetime.now(UTC))  # fmt: skip
    except LocalEndpointError as error:
        raise InvalidArgument(f"invalid request: {error}", {"field": error.field}) from None
    pending = await _pending(temporal, ref)
    if len(pending) >= MAX_WAKES_PER_ACTOR:
        raise ApiError(f"actor {ref.key} already has {len(pending)} pending wakes, the most it may hold; "
                       "delete one first", {"pending": len(pending)}, reason=Reason.FAILED_PRECONDITION)  # fmt: skip
    try:
        await temporal.start_workflow(
            Operation.WAKE.value, WakeActorInput(actor=ref, path=wake.path, reason=wake.reason),
            id=wake.workflow_id, task_queue=TASK_QUEUE, task_timeout=WORKFLOW_TASK_TIMEOUT,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL, id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            search_attributes=search_attributes(atespace, name, Operation.WAKE),
            start_delay=max(wake.at - datetime.now(UTC), timedelta(0)), memo={"path": wake.path},
        )  # fmt: skip
    except WorkflowAlreadyStartedError:
        raise ApiError(f"actor {ref.key} already has a pending wake named {wake.name}; delete it first",
                       {"wake": wake.name}, reason=Reason.ALREADY_EXISTS) from None  # fmt: skip
    return _public(wake)


@router.get(PREFIX + "/wakes", **needs(Permission.NODES_REGISTER))
async def list_wakes(node: str, worker: str, atespace: str, name: str, store: StoreDep,
                     temporal: TemporalDep) -> WakeList:  # fmt: skip
    """The calling actor's pending wakes, soonest first (Temporal's visibility may lag a second)."""
    await _held(store, node, worker, atespace, name)
    return WakeList(items=[_public(w) for w in sorted(await _pending(temporal, ActorRef(atespace, name)),
                                                      key=lambda w: w.at)])  # fmt: skip


@router.delete(PREFIX + "/wakes/{wake}", status_code=204, **needs(Permission.NODES_REGISTER))
async def delete_wake(node: str, worker: str, atespace: str, name: str, wake: str, store: StoreDep,
                      temporal: TemporalDep) -> Response:  # fmt: skip
    """Cancel a pending wake of the calling actor (404 when it has none of that name, or it fired)."""
    await _held(store, node, worker, atespace, name)
    ref = ActorRef(atespace, name)
    try:
        await temporal.get_workflow_handle(f"{asked_wake_prefix(ref)}{wake}").terminate(
            reason=f"the actor cancelled wake {wake}"
        )
    except RPCError as error:
        if error.status != RPCStatusCode.NOT_FOUND:
            raise
        raise ApiError(f"actor {ref.key} has no pending wake named {wake}", {"wake": wake},
                       reason=Reason.NOT_FOUND) from None  # fmt: skip
    return Response(status_code=204)


async def cancel_all_wakes(temporal: Client, ref: ActorRef) -> int:
    """Cancel every pending wake of `ref` (its delete); returns how many there were."""
    pending = await _pending(temporal, ref)
    for wake in pending:
        try:
            await temporal.get_workflow_handle(wake.workflow_id).terminate(reason=f"actor {ref.key} was deleted")
        except RPCError as error:
            if error.status != RPCStatusCode.NOT_FOUND:
                raise
    return len(pending)


async def _pending(temporal: Client, ref: ActorRef) -> list[AskedWake]:
    """The wakes of `ref` not yet fired, from Temporal's visibility (running WakeActor workflows
    under the actor's asked-wake prefix; a delayed workflow is running until it fires)."""
    prefix = asked_wake_prefix(ref)
    query = (
        f"WorkflowType = '{Operation.WAKE.value}' AND ExecutionStatus = 'Running' "
        f"AND AteAtespace = '{ref.atespace}' AND AteActor = '{ref.name}'"
    )
    wakes: list[AskedWake] = []
    async for execution in temporal.list_workflows(query):
        if not execution.id.startswith(prefix) or execution.status != WorkflowExecutionStatus.RUNNING:
            continue
        at = execution.execution_time or execution.start_time
        path = (await execution.memo()).get("path")
        wakes.append(AskedWake(actor=ref, name=execution.id[len(prefix):], at=at.astimezone(UTC),
                               path=path if isinstance(path, str) else "/"))  # fmt: skip
    return wakes


def _public(wake: AskedWake) -> WakePublic:
    return WakePublic(name=wake.name, actor=wake.actor.key, at=wake.at, path=wake.path)
