"""/v1/workers (list) and /v1/nodes/{node} (atelet registration and heartbeat, what its image
pulls need, its sandboxes' exits, drain)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from temporalio.common import WorkflowIDConflictPolicy

from api.access.guard import needs
from api.deps import StoreDep, TemporalDep
from api.errors import InvalidArgument
from api.pull_secrets import node_credentials
from api.schemas import DrainRequest, ImagePullReport, NodeEvent, NodeRegistration, WorkerPublic
from api.views import worker_view
from domain.access import Permission
from domain.image_pulls import PullProgress, PullState
from domain.image_references import parse_registry_image
from domain.operations.drain import EvictionDeadlineInput
from domain.refs import ActorRef
from domain.temporal import TASK_QUEUE, WORKFLOW_TASK_TIMEOUT
from store import NotFound
from store.records import WorkerRegistration

router = APIRouter(tags=["workers"])


@router.get("/v1/workers", **needs(Permission.WORKERS_READ))
async def list_workers(store: StoreDep) -> dict[str, list[WorkerPublic]]:
    """Every worker with its state and the actors on it."""
    return {"items": [worker_view(w) for w in await store.nodes.list_workers()]}


@router.put("/v1/nodes/{node}", **needs(Permission.NODES_REGISTER))
async def register_node(node: str, body: NodeRegistration, store: StoreDep) -> dict[str, object]:
    """Register an atelet and its workers, or refresh them (idempotent; sent as a heartbeat).

    A lost node is alive again and its workers ACTIVE. When the atelet says what runs on each
    worker, the node is reconciled: an UNREACHABLE actor whose sandbox still runs is RUNNING
    again, RUNNING or UNREACHABLE actors whose sandbox is gone (or exited) become CRASHED, and
    `terminate` lists the sandboxes the atelet must stop because nothing is placed there for
    them any more (fencing: an actor reverted or moved while its node was silent). A worker's
    `egress_active` makes its actor active (its `last_active_at` becomes now), if it is placed
    there: an idle policy does not act on an actor whose outbound request is in flight.
    """
    reports_actors = any("actor" in w.model_fields_set for w in body.workers)
    running = (
        {w.name: ((w.actor.atespace, w.actor.name) if w.actor else None) for w in body.workers}
        if reports_actors
        else None
    )
    exited = frozenset(w.name for w in body.workers if w.actor and w.sandbox_state == "exited")
    orders = await store.nodes.register(
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
                runtime_version=w.runtime_version,
            )
            for w in body.workers
        ],
        running,
        exited,
    )
    # the actors whose outbound traffic the node's egress proxy saw: active (their idle time starts again)
    egress_active = [(w.name, ActorRef(w.actor.atespace, w.actor.name)) for w in body.workers
                     if w.egress_active and w.actor is not None]  # fmt: skip
    if egress_active:
        await store.actors.touch_egress_active(node, egress_active)
    return {
        "node": node,
        "workers": len(body.workers),
        "terminate": [{"worker": o.worker, "actor": {"atespace": o.atespace, "name": o.name}} for o in orders],
    }


@router.get("/v1/nodes/{node}/images", **needs(Permission.NODES_REGISTER))
async def images_for_node(node: str, store: StoreDep) -> dict[str, list[str]]:
    """The registry images the node should have before a resume needs them (issue 29, pre-pull):
    those of the templates whose sandbox class its active workers serve, pinned to their digests."""
    return {"images": await store.templates.registry_images_for_node(node)}


@router.get("/v1/nodes/{node}/image-credentials", **needs(Permission.NODES_REGISTER))
async def image_credentials_for_node(node: str, image: str, store: StoreDep, request: Request) -> dict[str, Any]:
    """The credentials the node may pull `image` (a registry image as its template records it,
    pinned) with: `{"credentials": [{secret, registry, username, password}], "problems": [...]}`,
    those of the pull secrets that the templates running the image, of a class the node serves,
    list (`api.pull_secrets.node_credentials`); none: the pull is anonymous. Only the node's own
    credentials reach this route; the values are never logged nor kept by the API."""
    try:
        parsed = parse_registry_image(image)
    except ValueError as error:
        raise InvalidArgument(f"image: {error}", {"field": "image"}) from None
    usable, problems = await node_credentials(store, getattr(request.app.state, "secret_box", None), node, parsed,
                                              image)  # fmt: skip
    return {"credentials": [c.document() for c in usable], "problems": problems}


@router.put("/v1/nodes/{node}/pulls", **needs(Permission.NODES_REGISTER))
async def report_image_pull(node: str, body: ImagePullReport, store: StoreDep) -> dict[str, bool]:
    """The node's look at its pull of a registry image (layers, bytes so far), which a Pending
    template running the image shows; `accepted` is false, and nothing stored, for a node that
    never registered."""
    if body.bytes_done > body.bytes_total:
        raise InvalidArgument(f"bytes_done: {body.bytes_done} is more than bytes_total {body.bytes_total}",
                              {"field": "bytes_done"})  # fmt: skip
    progress = PullProgress(body.layers, body.bytes_total, body.bytes_done, PullState(body.state), body.message)
    return {"accepted": await store.image_pulls.record(node, body.image, progress)}


@router.post("/v1/nodes/{node}/events", **needs(Permission.NODES_REGISTER))
async def node_event(node: str, body: NodeEvent, store: StoreDep) -> dict[str, bool]:
    """An atelet reports that a sandbox exited on its own: its RUNNING (or UNREACHABLE) actor
    becomes CRASHED."""
    accepted = await store.nodes.record_sandbox_exit(
        node, body.worker, ActorRef(body.actor.atespace, body.actor.name), body.reason or "no reason given"
    )
    return {"accepted": accepted}


@router.post("/v1/nodes/{node}/drain", **needs(Permission.NODES_DRAIN))
async def drain_node(node: str, body: DrainRequest, temporal: TemporalDep, store: StoreDep) -> dict[str, str]:
    """Drain a node: its workers take no new actors, its actors are suspended now, and what is
    left at the deadline is terminated and marked CRASHED (the EvictionDeadline workflow).
    404 for a node that is not registered (the workflow would fail after the answer)."""
    if not await store.nodes.exists(node):
        raise NotFound(f"node {node} not found; the registered nodes are in 'ate get workers'")
    handle = await temporal.start_workflow(
        "EvictionDeadline",
        EvictionDeadlineInput(node=node, deadline_seconds=body.deadline_seconds),
        id=f"node/{node}/drain",
        task_queue=TASK_QUEUE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        task_timeout=WORKFLOW_TASK_TIMEOUT,
    )
    return {"node": node, "workflow_id": handle.id}


@router.post("/v1/nodes/{node}/undrain", **needs(Permission.NODES_DRAIN))
async def undrain_node(node: str, store: StoreDep) -> dict[str, str]:
    """End a node's drain: its workers take actors again."""
    await store.drains.end(node)
    return {"node": node, "state": "ACTIVE"}
