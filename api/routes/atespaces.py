"""/v1/atespaces: create, get, list, delete (refused while actors or templates remain)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from api.deps import StoreDep
from api.names import check_name
from api.schemas import AtespaceCreate, AtespacePublic

router = APIRouter(prefix="/v1/atespaces", tags=["atespaces"])


@router.post("", status_code=201)
async def create_atespace(body: AtespaceCreate, store: StoreDep) -> AtespacePublic:
    """Create an atespace."""
    record = await store.atespaces.create(check_name("name", body.name))
    return AtespacePublic(name=record.name, created_at=record.created_at)


@router.get("")
async def list_atespaces(store: StoreDep) -> dict[str, list[AtespacePublic]]:
    """Every atespace."""
    return {"items": [AtespacePublic(name=a.name, created_at=a.created_at) for a in await store.atespaces.all()]}


@router.get("/{atespace}")
async def get_atespace(atespace: str, store: StoreDep) -> AtespacePublic:
    """One atespace."""
    record = await store.atespaces.get(atespace)
    return AtespacePublic(name=record.name, created_at=record.created_at)


@router.delete("/{atespace}", status_code=204)
async def delete_atespace(atespace: str, store: StoreDep) -> Response:
    """Delete an empty atespace."""
    await store.atespaces.delete(atespace)
    return Response(status_code=204)
