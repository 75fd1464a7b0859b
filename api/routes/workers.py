"""/v1/workers (list) and /v1/nodes/{node} (atelet registration and heartbeat)."""

from __future__ import annotations

from fastapi import APIRouter

from activities.store.records import WorkerRegistration
from api.deps import StoreDep
from api.schemas import NodeRegistration, WorkerPublic
from api.views import worker_view

router = APIRouter(tags=["workers"])


@router.get("/v1/workers")
async def list_workers(store: StoreDep) -> dict[str, list[WorkerPublic]]:
    """Every worker with its state and the actors on it."""
    return {"items": [worker_view(w) for w in await store.list_workers()]}


@router.put("/v1/nodes/{node}")
async def register_node(node: str, body: NodeRegistration, store: StoreDep) -> dict[str, object]:
    """Register an atelet and its workers, or refresh them (idempotent; sent as a heartbeat)."""
    await store.register_node(
        node,
        body.address,
        body.runsc_version,
        [
            WorkerRegistration(
                name=w.name,
                pool=w.pool,
                ip=w.ip,
                sandbox_class=w.sandbox_class,
                labels=w.labels,
                places=w.places,
                cpu_millis=w.cpu_millis,
                memory_bytes=w.memory_bytes,
            )
            for w in body.workers
        ],
    )
    return {"node": node, "workers": len(body.workers)}
