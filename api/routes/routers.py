"""/v1/routers: router replicas register and heartbeat (reporting the actors with traffic since
the last one), get the drains they must carry out, and acknowledge each once done (SuspendActor
and PauseActor wait for that before a checkpoint), or refuse an idle action's drain as busy."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from api.access.guard import needs
from api.deps import StoreDep
from api.schemas import RouterDrainAck, RouterDrainPublic, RouterHeartbeat, RouterReplicaPublic
from domain.access import Permission
from domain.refs import ActorRef

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
    """Register a router replica or refresh its lease (sent as a heartbeat); the actors it names
    in `active` had traffic there since its last heartbeat (their `last_active_at` becomes now:
    idleness is judged across every replica). The answer lists the drains it has not
    acknowledged yet (those of the last 5 minutes), each with `if_idle`, and `touched`, how
    many of the `active` actors exist."""
    touched = 0
    if body.active:
        touched = await store.actors.touch([ActorRef(*key.split("/", 1)) for key in sorted(set(body.active))])
    pending = await store.router_drains.heartbeat(replica, body.lease_seconds, body.drain_timeout_seconds)
    return {
        "replica": replica,
        "lease_seconds": body.lease_seconds,
        "drains": [
            RouterDrainPublic(id=d.drain_id, atespace=d.actor.atespace, name=d.actor.name, if_idle=d.if_idle)
            for d in pending
        ],
        "touched": touched,
    }


@router.delete("/v1/routers/{replica}", status_code=204, **needs(Permission.ROUTERS_REGISTER))
async def release_router(replica: str, store: StoreDep) -> None:
    """A replica that stopped cleanly (its requests finished) gives its lease back: drains stop
    waiting for it at once instead of until its lease runs out. It stays listed, not live, until
    it has been silent for an hour. 404 for an unknown replica."""
    await store.router_drains.release(replica)


@router.post("/v1/routers/{replica}/drains/{drain_id}/ack", **needs(Permission.ROUTERS_REGISTER))
async def acknowledge_drain(
    replica: str,
    drain_id: Annotated[int, Path(ge=1, le=2**63 - 1)],
    store: StoreDep,
    body: RouterDrainAck | None = None,
) -> dict[str, object]:
    """A replica has drained an actor: no request of it is in flight there and none will be sent
    to its old worker; or, with body `{"busy": true}`, it refused an idle action's drain because
    a request of the actor is in flight there (it drained nothing; the action is abandoned).
    Idempotent: the first answer stays. 404 for an unknown drain."""
    busy = body is not None and body.busy
    await store.router_drains.acknowledge(drain_id, replica, busy)
    return {"replica": replica, "drain_id": drain_id, "acknowledged": True, "busy": busy}
