"""/v1/atespaces: create, get, list, delete (refused while actors or templates remain)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from api.access.guard import PrincipalDep, needs, readable_atespaces
from api.deps import StoreDep
from api.names import check_name
from api.schemas import AtespaceCreate, AtespacePublic
from domain.access import Permission

router = APIRouter(prefix="/v1/atespaces", tags=["atespaces"])


@router.post("", status_code=201, **needs(Permission.ATESPACES_MANAGE))
async def create_atespace(body: AtespaceCreate, store: StoreDep) -> AtespacePublic:
    """Create an atespace."""
    record = await store.atespaces.create(check_name("name", body.name))
    return AtespacePublic(name=record.name, created_at=record.created_at)


@router.get("", **needs(Permission.ATESPACES_READ))
async def list_atespaces(store: StoreDep, principal: PrincipalDep) -> dict[str, list[AtespacePublic]]:
    """The atespaces the caller may read."""
    shown = readable_atespaces(principal, Permission.ATESPACES_READ, None)
    return {
        "items": [
            AtespacePublic(name=a.name, created_at=a.created_at)
            for a in await store.atespaces.all()
            if shown is None or a.name in shown
        ]
    }


@router.get("/{atespace}", **needs(Permission.ATESPACES_READ))
async def get_atespace(atespace: str, store: StoreDep) -> AtespacePublic:
    """One atespace."""
    record = await store.atespaces.get(atespace)
    return AtespacePublic(name=record.name, created_at=record.created_at)


@router.delete("/{atespace}", status_code=204, **needs(Permission.ATESPACES_MANAGE))
async def delete_atespace(atespace: str, store: StoreDep) -> Response:
    """Delete an empty atespace."""
    await store.atespaces.delete(atespace)
    return Response(status_code=204)
