"""/v1/.../actors: create, get, list, update, delete, resume, suspend.

Resume and suspend run as workflows under the actor's workflow-ID lock (api.operations).
Resuming a RUNNING actor and suspending a SUSPENDED one answer from Postgres at once: the
router relies on that.
"""

from __future__ import annotations

from fastapi import APIRouter, Query, Response

from api.deps import SettingsDep, StoreDep, TemporalDep
from api.metrics import timed
from api.names import check_name
from api.operations import start_or_attach, wait_result
from api.schemas import (
    ActorCreate,
    ActorList,
    ActorPublic,
    ActorUpdate,
    ResumeRequest,
    SuspendRequest,
)
from api.views import actor_view, decode_page_token, encode_page_token
from workflows.types import (
    ActorRef,
    ActorState,
    Operation,
    ResumeActorInput,
    ResumeActorResult,
    SuspendActorInput,
    SuspendActorResult,
)

router = APIRouter(tags=["actors"])
PREFIX = "/v1/atespaces/{atespace}/actors"


async def _list(store: StoreDep, atespace: str | None, page_size: int, page_token: str | None) -> ActorList:
    if atespace is not None:
        await store.get_atespace(atespace)
    actors, next_key = await store.list_actors(atespace, decode_page_token(page_token), page_size)
    return ActorList(items=[actor_view(a) for a in actors], next_page_token=encode_page_token(next_key))


@router.get("/v1/actors")
async def list_all_actors(
    store: StoreDep,
    atespace: str | None = None,
    page_size: int = Query(100, ge=1, le=1000),
    page_token: str | None = None,
) -> ActorList:
    """Actors of every atespace (or of `atespace`), one page at a time."""
    return await _list(store, atespace, page_size, page_token)


@router.get(PREFIX)
async def list_actors(
    atespace: str, store: StoreDep, page_size: int = Query(100, ge=1, le=1000), page_token: str | None = None
) -> ActorList:
    """Actors of one atespace, one page at a time."""
    return await _list(store, atespace, page_size, page_token)


@router.post(PREFIX, status_code=201)
async def create_actor(atespace: str, body: ActorCreate, store: StoreDep) -> ActorPublic:
    """Create an actor (SUSPENDED; its first resume restores the template's golden snapshot)."""
    ref = ActorRef(atespace=atespace, name=check_name("name", body.name))
    await store.get_atespace(atespace)
    return actor_view(await store.create_actor(ref, body.template, body.worker_selector))


@router.get(PREFIX + "/{name}")
async def get_actor(atespace: str, name: str, store: StoreDep) -> ActorPublic:
    """One actor."""
    return actor_view(await store.get_actor(ActorRef(atespace, name)))


@router.patch(PREFIX + "/{name}")
async def update_actor(atespace: str, name: str, body: ActorUpdate, store: StoreDep) -> ActorPublic:
    """Replace the actor's worker_selector (takes effect at its next resume)."""
    return actor_view(await store.update_actor_selector(ActorRef(atespace, name), body.worker_selector))


@router.delete(PREFIX + "/{name}", status_code=204)
async def delete_actor(atespace: str, name: str, store: StoreDep) -> Response:
    """Delete a SUSPENDED actor."""
    await store.delete_actor(ActorRef(atespace, name))
    return Response(status_code=204)


@router.post(PREFIX + "/{name}/resume")
async def resume_actor(
    atespace: str,
    name: str,
    store: StoreDep,
    temporal: TemporalDep,
    settings: SettingsDep,
    body: ResumeRequest | None = None,
) -> ActorPublic:
    """Resume the actor and return it RUNNING (at once when it already runs)."""
    ref = ActorRef(atespace, name)
    with timed(Operation.RESUME.value):
        actor = await store.get_actor(ref)
        if actor.state == ActorState.RUNNING:
            return actor_view(actor)
        timeout = (body.timeout_seconds if body else None) or settings.resume_timeout_seconds
        handle = await start_or_attach(
            temporal,
            Operation.RESUME,
            ResumeActorInput(actor=ref),
            workflow_id=ref.workflow_id,
            atespace=atespace,
            name=name,
            result_type=ResumeActorResult,
            subject=f"actor {ref.key}",
        )
        await wait_result(handle, timeout, f"actor {ref.key}", "resume")
        return actor_view(await store.get_actor(ref))


@router.post(PREFIX + "/{name}/suspend")
async def suspend_actor(
    atespace: str,
    name: str,
    store: StoreDep,
    temporal: TemporalDep,
    settings: SettingsDep,
    body: SuspendRequest | None = None,
) -> ActorPublic:
    """Suspend the actor (sync: its snapshot is stored) and return it SUSPENDED."""
    ref = ActorRef(atespace, name)
    with timed(Operation.SUSPEND.value):
        actor = await store.get_actor(ref)
        if actor.state == ActorState.SUSPENDED:
            return actor_view(actor)
        timeout = (body.timeout_seconds if body else None) or settings.suspend_timeout_seconds
        handle = await start_or_attach(
            temporal,
            Operation.SUSPEND,
            SuspendActorInput(actor=ref, mode=body.mode if body else "sync"),
            workflow_id=ref.workflow_id,
            atespace=atespace,
            name=name,
            result_type=SuspendActorResult,
            subject=f"actor {ref.key}",
        )
        await wait_result(handle, timeout, f"actor {ref.key}", "suspend")
        return actor_view(await store.get_actor(ref))
