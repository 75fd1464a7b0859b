"""/v1/.../actors: create, get, list, update, delete, resume, suspend, pause, revert, tags.

Operations run as workflows under the actor's workflow-ID lock (api.operations). Resuming a
RUNNING actor, suspending a SUSPENDED one and pausing a PAUSED one answer from Postgres at
once: the router relies on the first. So does every operation but a revert of an UNREACHABLE
actor: a resume answers 503 Unreachable (the router parks and retries: the node may return), a
suspend or pause 409 FailedPrecondition (both need the node), each saying how long the node has
been silent and how much of the grace is left.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, cast

from fastapi import APIRouter, Query, Response

from api.access.guard import PrincipalDep, needs, readable_atespaces
from api.actor_changes import ActorChanges
from api.deps import ActorChangesDep, SettingsDep, StoreDep, TemporalDep
from api.egress import check_credential_secrets, narrowed
from api.errors import ApiError, InvalidArgument
from api.metrics import timed
from api.names import check_name
from api.operations import CLOSING_GRACE_SECONDS, start_or_attach, take_over, wait_result
from api.routes.local_endpoint import cancel_all_wakes
from api.routes.schedules import delete_all
from api.schemas import (
    ActorCreate,
    ActorList,
    ActorPublic,
    ActorUpdate,
    ForkCreate,
    ForkList,
    OperationPublic,
    PauseRequest,
    ResumeRequest,
    RevertRequest,
    SuspendRequest,
    TagCreate,
    TagPublic,
)
from api.views import actor_view, decode_page_token, encode_page_token, operation_view, tag_view
from domain.access import Permission
from domain.egress import parse_egress_policy
from domain.forks import fork_names
from domain.idle import parse_idle_policy
from domain.liveness import unreachable_message, unreachable_refusal
from domain.operations.freeze import FreezeActorInput, FreezeActorResult
from domain.operations.pause import PauseActorInput, PauseActorResult
from domain.operations.resume import ROOM_ANSWER_MARGIN_SECONDS, ResumeActorInput, ResumeActorResult
from domain.operations.revert import RevertActorInput, RevertActorResult
from domain.operations.suspend import SuspendActorInput, SuspendActorResult
from domain.reasons import Reason
from domain.refs import ActorRef
from domain.states import TRANSITIONS, ActorState, Operation

router = APIRouter(tags=["actors"])
PREFIX = "/v1/atespaces/{atespace}/actors"


async def _list(
    store: StoreDep,
    atespaces: set[str] | None,
    page_size: int,
    page_token: str | None,
    state: ActorState | None = None,
) -> ActorList:
    actors, next_key = await store.actors.page(
        atespaces, decode_page_token(page_token), page_size, state.value if state else None
    )
    return ActorList(items=[actor_view(a) for a in actors], next_page_token=encode_page_token(next_key))


@router.get("/v1/actors", **needs(Permission.ACTORS_READ))
async def list_all_actors(
    store: StoreDep,
    principal: PrincipalDep,
    atespace: str | None = None,
    page_size: int = Query(100, ge=1, le=1000),
    page_token: str | None = None,
    state: ActorState | None = None,
) -> ActorList:
    """Actors of every atespace the caller may read (or of `atespace`, or in one `state`), one
    page at a time."""
    shown = readable_atespaces(principal, Permission.ACTORS_READ, atespace)
    if atespace is not None:
        await store.atespaces.get(atespace)
    return await _list(store, shown, page_size, page_token, state)


@router.get(PREFIX, **needs(Permission.ACTORS_READ))
async def list_actors(
    atespace: str, store: StoreDep, page_size: int = Query(100, ge=1, le=1000), page_token: str | None = None
) -> ActorList:
    """Actors of one atespace, one page at a time."""
    await store.atespaces.get(atespace)
    return await _list(store, {atespace}, page_size, page_token)


@router.post(PREFIX, status_code=201, **needs(Permission.ACTORS_MANAGE))
async def create_actor(atespace: str, body: ActorCreate, store: StoreDep) -> ActorPublic:
    """Create an actor (SUSPENDED). From a template, its first resume restores the golden
    snapshot; from a tag (`from_tag: <atespace>/<tag>`), the tagged snapshot."""
    ref = ActorRef(atespace=atespace, name=check_name("name", body.name))
    await store.atespaces.get(atespace)
    tag = None
    template = body.template
    if body.from_tag is not None:
        tag_atespace, tag_name = body.from_tag.split("/", 1)
        tag = await store.tags.get(tag_atespace, tag_name)
        template = template or tag.template
        if template is None:
            raise InvalidArgument(
                f"tag {body.from_tag} comes from an actor that no longer exists; give template as well",
                {"field": "template"},
            )
    assert template is not None
    record = await store.templates.get(atespace, template)
    if record.phase == "Failed":
        raise ApiError(
            f"actor template {atespace}/{template} failed ({record.reason}); fix it and create it again",
            {"template_phase": "Failed"},
            reason=Reason.FAILED_PRECONDITION,
        )
    idle = None if body.idle is None else parse_idle_policy(body.idle)
    egress = None if body.egress is None else narrowed(record.spec, parse_egress_policy(body.egress))
    if egress is not None:
        await check_credential_secrets(store, atespace, egress, "egress")
    actor = await store.actors.create(ref, template, body.worker_selector, idle, egress)
    if tag is not None:
        await store.tags.start_from(ref, tag)
        actor = await store.actors.get(ref)
    return actor_view(actor)


@router.post(PREFIX + "/{name}/forks", status_code=201, **needs(Permission.ACTORS_MANAGE))
async def fork_actor(atespace: str, name: str, body: ForkCreate, store: StoreDep) -> ForkList:
    """Create actors (SUSPENDED) that start from actor `name`'s snapshot: its latest completed
    one, or kept `generation`. With `count`, NAME-1..NAME-count; all or none. Each has the
    source's template, worker selector, idle and egress policies, and shares the snapshot's files
    until its own first suspend (nothing is copied now; the collector keeps the snapshot while a
    fork rests on it)."""
    source = ActorRef(atespace, name)
    stem = check_name("name", body.name)
    try:
        names = [check_name("name", n) for n in fork_names(stem, body.count)]
    except ApiError as error:
        raise InvalidArgument(
            f"name: {stem!r} with count {body.count} makes names longer than 63 characters; use a shorter name",
            {"field": "name"},
        ) from error
    forked = await store.forks.create(source, names, body.generation)
    return ForkList(items=[actor_view(a) for a in forked])


@router.get(PREFIX + "/{name}", **needs(Permission.ACTORS_READ))
async def get_actor(atespace: str, name: str, store: StoreDep) -> ActorPublic:
    """One actor."""
    return actor_view(await store.actors.get(ActorRef(atespace, name)))


@router.patch(PREFIX + "/{name}", **needs(Permission.ACTORS_MANAGE))
async def update_actor(atespace: str, name: str, body: ActorUpdate, store: StoreDep) -> ActorPublic:
    """Replace the fields given: the actor's worker_selector (takes effect at its next resume),
    its own idle policy (at once; null: its template's again), its own egress policy (within its
    template's; from its next outbound connection; null: its template's again)."""
    ref = ActorRef(atespace, name)
    actor = await store.actors.get(ref)  # 404 before anything changes
    egress = None
    if "egress" in body.model_fields_set and body.egress is not None:
        template = await store.templates.get(atespace, actor.template)
        egress = narrowed(template.spec, parse_egress_policy(body.egress))
        await check_credential_secrets(store, atespace, egress, "egress")  # checked before anything changes
    if "idle" in body.model_fields_set:
        await store.idleness.set_policy(ref, None if body.idle is None else parse_idle_policy(body.idle))
    if "egress" in body.model_fields_set:
        await store.actors.set_egress_policy(ref, egress)
    if body.worker_selector is not None:
        await store.actors.update_selector(ref, body.worker_selector)
    return actor_view(await store.actors.get(ref))


@router.delete(PREFIX + "/{name}", status_code=204, **needs(Permission.ACTORS_MANAGE))
async def delete_actor(
    atespace: str, name: str, store: StoreDep, temporal: TemporalDep, force: bool = False
) -> Response:
    """Delete a SUSPENDED actor, its schedules and the wakes it asked for; with `force=true` from any state, after
    stopping whatever operation runs, terminating its sandbox and releasing its worker (a revert
    first)."""
    ref = ActorRef(atespace, name)
    if force:
        actor = await store.actors.get(ref)
        if actor.state != ActorState.SUSPENDED:
            await _revert(ref, temporal, timeout=60.0, reason="forced delete")
    await store.actors.delete(ref)
    await delete_all(temporal, ref)  # its schedules would wake an actor that no longer exists
    await cancel_all_wakes(temporal, ref)  # so would the wakes it asked for
    return Response(status_code=204)


async def _revert(
    ref: ActorRef, temporal: TemporalDep, timeout: float, reason: str, to_generation: int | None = None
) -> RevertActorResult:
    handle = await take_over(
        temporal, Operation.REVERT, RevertActorInput(actor=ref, to_generation=to_generation),
        workflow_id=ref.workflow_id, atespace=ref.atespace, name=ref.name, result_type=RevertActorResult,
        reason=f"{reason} of actor {ref.key} requested",
    )  # fmt: skip
    return await wait_result(handle, timeout, f"actor {ref.key}", "revert")


@router.post(PREFIX + "/{name}/revert", **needs(Permission.ACTORS_OPERATE))
async def revert_actor(
    atespace: str, name: str, store: StoreDep, temporal: TemporalDep, body: RevertRequest | None = None
) -> ActorPublic:
    """Revert the actor to SUSPENDED with its last COMPLETED snapshot, or with `to_generation`,
    a kept earlier (or later) completed generation of its own.

    From RUNNING, UNREACHABLE, PAUSED, CRASHED, or a RESUMING/SUSPENDING that is stuck: an
    operation in flight on the actor is stopped first (a resume blocked on a dead node does not
    block the way out). An UNREACHABLE actor's sandbox is left to its node's next heartbeat,
    which has it terminated (nothing is placed there for it any more). Refused from SUSPENDED with `actor is not in a revertable state (state: X)`,
    unless an async suspend's snapshot still waits for its upload (a revert drops it) or
    `to_generation` is given. A `to_generation` that is not kept is refused (400, naming the kept
    ones) before anything is stopped.
    """
    ref = ActorRef(atespace, name)
    to_generation = body.to_generation if body else None
    with timed(Operation.REVERT.value):
        actor = await store.actors.get(ref)
        if to_generation is not None:
            await store.snapshot_listing.check_kept(ref, to_generation)
        elif actor.state == ActorState.SUSPENDED and not actor.upload_pending:
            raise ApiError(
                f"actor {ref.key} is not in a revertable state (state: SUSPENDED); it already rests on its "
                f"last completed snapshot (to go back further: --to-generation G, one of "
                f"`ate get snapshots -a {ref.atespace} --actor {ref.name}`)",
                {"state": "SUSPENDED"},
                reason=Reason.FAILED_PRECONDITION,
            )
        timeout = (body.timeout_seconds if body else None) or 60.0
        await _revert(ref, temporal, timeout=timeout, reason="revert", to_generation=to_generation)
        return actor_view(await store.actors.get(ref))


@router.post(PREFIX + "/{name}/tags", status_code=201, **needs(Permission.ACTORS_OPERATE))
async def tag_actor(atespace: str, name: str, body: TagCreate, store: StoreDep) -> TagPublic:
    """Tag the actor's latest COMPLETED snapshot as `<atespace>/<tag>`."""
    tag = await store.tags.create(ActorRef(atespace, name), check_name("tag", body.tag))
    return tag_view(tag)


@router.get("/v1/atespaces/{atespace}/tags", **needs(Permission.ACTORS_READ))
async def list_tags(atespace: str, store: StoreDep) -> dict[str, list[TagPublic]]:
    """The tags of an atespace."""
    await store.atespaces.get(atespace)
    return {"items": [tag_view(t) for t in await store.tags.of_atespace(atespace)]}


@router.get(PREFIX + "/{name}/operations", **needs(Permission.ACTORS_READ))
async def actor_operations(
    atespace: str, name: str, store: StoreDep, limit: int = Query(10, ge=1, le=100)
) -> dict[str, list[OperationPublic]]:
    """The actor's last operations, newest first, with outcome, duration, worker and error."""
    ref = ActorRef(atespace, name)
    await store.actors.get(ref)
    return {"items": [operation_view(o) for o in await store.history.of_actor(ref, limit)]}


GIVING_WAY = frozenset({Operation.SUSPEND, Operation.PAUSE, Operation.FREEZE})
"""Operations ate also starts by itself (idle steps, pressure), which give way to traffic."""


async def _operate(
    store: StoreDep,
    temporal: TemporalDep,
    ref: ActorRef,
    operation: Operation,
    argument: object,
    result_type: type[object],
    resting: ActorState,
    timeout: float,
    changes: ActorChanges | None = None,
) -> ActorPublic:
    """`_operate_once`, and once more when it attached to an operation of the same kind that ate
    had started by itself and that gave way to a request (the actor is not `resting` and nothing
    holds it): what a user asks for is done, not silently dropped."""
    try:
        view = await _operate_once(store, temporal, ref, operation, argument, result_type, resting, timeout, changes)
        if operation in GIVING_WAY and view.state != resting.value and view.operation is None:
            view = await _operate_once(
                store, temporal, ref, operation, argument, result_type, resting, timeout, changes
            )
    except ApiError as error:
        if error.reason != Reason.SNAPSHOT_DAMAGED:
            raise
        raise await _with_way_back(store, ref, error) from error
    return view


async def _with_way_back(store: StoreDep, ref: ActorRef, damaged: ApiError) -> ApiError:
    """A `SnapshotDamaged` answer with the generations a revert can go back to past the damaged
    latest one (issue 30): their numbers in the message and in `details.kept_generations`."""
    actor = await store.actors.get(ref)
    latest = actor.latest_snapshot.generation if actor.latest_snapshot is not None else None
    earlier = [g for g in await store.snapshot_listing.kept(ref) if g != latest]
    if not earlier:
        return damaged
    newest = max(earlier)
    message = (
        f"{damaged.message}; or go back to an earlier generation it keeps ({', '.join(map(str, earlier))}): "
        f"`ate revert actor {ref.name} -a {ref.atespace} --to-generation {newest}` (what it did since is lost)"
    )
    return ApiError(message, {**damaged.details, "kept_generations": earlier}, reason=Reason.SNAPSHOT_DAMAGED)


async def _operate_once(
    store: StoreDep,
    temporal: TemporalDep,
    ref: ActorRef,
    operation: Operation,
    argument: object,
    result_type: type[object],
    resting: ActorState,
    timeout: float,
    changes: ActorChanges | None = None,
) -> ActorPublic:
    """Run `operation` on the actor under its workflow-ID lock and return the actor after it.

    Answers at once when the actor already rests in `resting` (the router relies on this for
    resume). When Postgres shows no operation in flight, a workflow of another kind holding the
    lock is only closing: it is given `CLOSING_GRACE_SECONDS` before the 409. With `changes`
    (a resume, a sync suspend), it answers as soon as the commit of the operation's last step
    NOTIFYs the actor in `resting`, not only once the workflow's result comes back
    (api.actor_changes).
    """
    actor = await store.actors.get(ref)
    if actor.state == resting:
        return actor_view(actor)
    if actor.state == ActorState.UNREACHABLE:
        raise await _unreachable(store, ref, operation)
    with contextlib.ExitStack() as stack:
        committed = stack.enter_context(changes.expecting(ref.key, resting.value)) if changes else None
        handle = await start_or_attach(
            temporal,
            operation,
            argument,
            workflow_id=ref.workflow_id,
            atespace=ref.atespace,
            name=ref.name,
            result_type=result_type,
            subject=f"actor {ref.key}",
            closing_grace_seconds=CLOSING_GRACE_SECONDS if actor.operation is None else 0.0,
        )
        result = wait_result(handle, timeout, f"actor {ref.key}", _verb(operation), timeout_advice(ref, operation))
        if committed is None:
            await result
            return actor_view(await store.actors.get(ref))
        read: list[ActorPublic] = []

        async def confirmed() -> bool:
            view = actor_view(await store.actors.get(ref))
            read.append(view)
            return view.state == resting.value

        if await first_of(result, committed, confirmed):
            return read[-1]
    return actor_view(await store.actors.get(ref))


def timeout_advice(ref: ActorRef, operation: Operation) -> str:
    """What a user can do about an operation that outlived the request: follow it, and for a
    resume (an actor a request waits for) take it back to its last snapshot if it stays stuck."""
    advice = f"; follow it with `ate get operations -a {ref.atespace} --actor {ref.name}`"
    if operation == Operation.RESUME:
        advice += (f"; if it stays stuck, `ate revert actor {ref.name} -a {ref.atespace}` brings the actor back "
                   "to its last snapshot")
    return advice


async def first_of(
    result: Coroutine[Any, Any, object], committed: asyncio.Future[None], confirmed: Callable[[], Awaitable[bool]]
) -> bool:
    """Wait for the workflow's `result` or for the NOTIFY of the commit (`committed`), whichever
    comes first. When the NOTIFY comes first and `confirmed()` agrees (the actor read back is in
    the state waited for), `result` is cancelled (the workflow goes on to its completion
    without us) and True returned; otherwise the result is waited for, its errors raised, and
    False returned."""
    waiting: asyncio.Future[object] = asyncio.ensure_future(result)
    try:
        await asyncio.wait([waiting, cast(asyncio.Future[object], committed)], return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done() and await confirmed():
            return True
        await waiting
        return False
    finally:
        if not waiting.done():
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting


async def _unreachable(store: StoreDep, ref: ActorRef, operation: Operation) -> ApiError:
    """The answer to `operation` asked of an UNREACHABLE actor: 503 Unreachable for a resume (not
    final: the router retries), 409 FailedPrecondition for the others (they need its node)."""
    why = await store.liveness.unreachable(ref)
    if why is None:  # it left UNREACHABLE meanwhile
        return ApiError(f"actor {ref.key} was UNREACHABLE a moment ago; retry", reason=Reason.UNREACHABLE)
    details = {
        "state": ActorState.UNREACHABLE.value,
        "node": why.node,
        "grace_left_seconds": round(why.remaining_seconds),
    }
    if operation == Operation.RESUME:
        message = unreachable_message(ref.key, why.node, why.silent_seconds, why.remaining_seconds)
        return ApiError(message, details, reason=Reason.UNREACHABLE)
    participle = TRANSITIONS[operation].participle
    refusal = unreachable_refusal(ref.key, participle, why.node, why.silent_seconds, why.remaining_seconds)
    return ApiError(refusal, details, reason=Reason.FAILED_PRECONDITION)


def _verb(operation: Operation) -> str:
    """`resume`, `suspend`, `pause`...: how error messages name the operation."""
    return operation.value.removesuffix("Actor").lower()


@router.post(PREFIX + "/{name}/resume", **needs(Permission.ACTORS_RESUME))
async def resume_actor(
    atespace: str,
    name: str,
    store: StoreDep,
    temporal: TemporalDep,
    settings: SettingsDep,
    changes: ActorChangesDep,
    body: ResumeRequest | None = None,
) -> ActorPublic:
    """Resume the actor and return it RUNNING (at once when it already runs; as soon as the
    resume's last step committed RUNNING otherwise)."""
    ref = ActorRef(atespace, name)
    with timed(Operation.RESUME.value):
        timeout = (body.timeout_seconds if body else None) or settings.resume_timeout_seconds
        # The resume gives up waiting for room before the answer is due, so that the caller hears
        # "no room" (503, with what placement found) rather than "still resuming" (504).
        room_wait = max(0.0, min(body.room_wait_seconds if body else 0.0, timeout - ROOM_ANSWER_MARGIN_SECONDS))
        return await _operate(
            store, temporal, ref, Operation.RESUME, ResumeActorInput(actor=ref, room_wait_seconds=room_wait),
            ResumeActorResult, ActorState.RUNNING, timeout, changes,
        )  # fmt: skip


@router.post(PREFIX + "/{name}/suspend", **needs(Permission.ACTORS_OPERATE))
async def suspend_actor(
    atespace: str,
    name: str,
    store: StoreDep,
    temporal: TemporalDep,
    settings: SettingsDep,
    changes: ActorChangesDep,
    body: SuspendRequest | None = None,
) -> ActorPublic:
    """Suspend the actor and return it SUSPENDED. Mode sync: its snapshot is in the storage
    location; the answer comes as soon as the suspend's finalize committed. Mode async: its
    checkpoint is on its node, pinned there, and an UploadSnapshot workflow uploads it in the
    background (`upload_pending` until then); the answer comes once that workflow is started."""
    ref = ActorRef(atespace, name)
    with timed(Operation.SUSPEND.value):
        timeout = (body.timeout_seconds if body else None) or settings.suspend_timeout_seconds
        argument = SuspendActorInput(actor=ref, mode=body.mode if body else "sync")
        return await _operate(
            store, temporal, ref, Operation.SUSPEND, argument, SuspendActorResult, ActorState.SUSPENDED, timeout,
            changes if argument.mode == "sync" else None,
        )  # fmt: skip


@router.post(PREFIX + "/{name}/pause", **needs(Permission.ACTORS_OPERATE))
async def pause_actor(
    atespace: str,
    name: str,
    store: StoreDep,
    temporal: TemporalDep,
    settings: SettingsDep,
    body: PauseRequest | None = None,
) -> ActorPublic:
    """Pause the actor: checkpoint it onto its node (a local snapshot) and free its worker; it
    returns PAUSED, pinned to that node, and its next resume restores there. Refused unless
    RUNNING (at once when already PAUSED)."""
    ref = ActorRef(atespace, name)
    with timed(Operation.PAUSE.value):
        timeout = (body.timeout_seconds if body else None) or settings.suspend_timeout_seconds
        return await _operate(
            store, temporal, ref, Operation.PAUSE, PauseActorInput(actor=ref), PauseActorResult,
            ActorState.PAUSED, timeout,
        )  # fmt: skip


@router.post(PREFIX + "/{name}/freeze", **needs(Permission.ACTORS_OPERATE))
async def freeze_actor(
    atespace: str,
    name: str,
    store: StoreDep,
    temporal: TemporalDep,
    settings: SettingsDep,
    body: PauseRequest | None = None,
) -> ActorPublic:
    """Freeze the actor: stop its sandbox in place (it keeps its worker and memory and uses no
    CPU); its next request, or a resume, thaws it in milliseconds. Refused unless RUNNING (at
    once when already FROZEN). An idle policy's `Freeze` step does the same by itself."""
    ref = ActorRef(atespace, name)
    with timed(Operation.FREEZE.value):
        timeout = (body.timeout_seconds if body else None) or settings.suspend_timeout_seconds
        return await _operate(
            store, temporal, ref, Operation.FREEZE, FreezeActorInput(actor=ref), FreezeActorResult,
            ActorState.FROZEN, timeout,
        )  # fmt: skip
