"""/v1/routers: router replicas register and heartbeat, get the drains they must carry out,
and acknowledge each once done (SuspendActor and PauseActor wait for that before a checkpoint)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from api.access.guard import needs
from api.deps import StoreDep
from api.schemas import RouterDrainPublic, RouterHeartbeat, RouterReplicaPublic
from domain.access import Permission

router = APIRouter(tags=["routers"])


@router.get("/v1/routers", **needs(Permission.WORKERS_READ))
async def list_routers(store: StoreDep) -> dict[str, list[RouterReplicaPublic]]:
    """Every registered router replica, and whether its lease still runs."""
    return {
        "items": [
            RouterReplicaPublic(
                name=r.name,
                started_at=r.started_at,
                last_seen_at=r.last_seen_at,
                lease_seconds=r.lease_seconds,
                drain_timeout_seconds=r.drain_timeout_seconds,
                live=r.live,
            )
            for r in await store.router_drains.replicas()
        ]
    }


@router.put("/v1/routers/{replica}", **needs(Permission.ROUTERS_REGISTER))
async def heartbeat_router(replica: str, body: RouterHeartbeat, store: StoreDep) -> dict[str, object]:
    """Register a router replica or refresh its lease (sent as a heartbeat); the answer lists the
    drains it has not acknowledged yet (those of the last 5 minutes)."""
    pending = await store.router_drains.heartbeat(replica, body.lease_seconds, body.drain_timeout_seconds)
    return {
        "replica": replica,
        "lease_seconds": body.lease_seconds,
        "drains": [RouterDrainPublic(id=d.drain_id, atespace=d.actor.atespace, name=d.actor.name) for d in pending],
    }


@router.delete("/v1/routers/{replica}", status_code=204, **needs(Permission.ROUTERS_REGISTER))
async def release_router(replica: str, store: StoreDep) -> None:
    """A replica that stopped cleanly (its requests finished) gives its lease back: drains stop
    waiting for it at once instead of until its lease runs out. It stays listed, not live, until
    it has been silent for an hour. 404 for an unknown replica."""
    await store.router_drains.release(replica)


@router.post("/v1/routers/{replica}/drains/{drain_id}/ack", **needs(Permission.ROUTERS_REGISTER))
async def acknowledge_drain(
    replica: str, drain_id: Annotated[int, Path(ge=1, le=2**63 - 1)], store: StoreDep
) -> dict[str, object]:
    """A replica has drained an actor: no request of it is in flight there and none will be sent
    to its old worker (idempotent). 404 for an unknown drain."""
    await store.router_drains.acknowledge(drain_id, replica)
    return {"replica": replica, "drain_id": drain_id, "acknowledged": True}
