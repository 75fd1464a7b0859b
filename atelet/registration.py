"""Registration and heartbeats with ate-api-server, and fencing by its answer.

When ``api_server`` is set: ``PUT {api_server}/v1/nodes/{node}`` with JSON ``{"address",
"runsc_version", "workers": [{"name", "pool", "ip", "sandbox_class", "runtime_version", "labels", "places",
"cpu_millis", "memory_bytes", "actor", "sandbox_state", "egress_active"}]}`` and the node's bearer token
(``atelet.node_identity``) at start and every ``heartbeat_seconds`` (on a fixed cadence: a slow
answer or a long fence does not delay the next beat, so the control plane's lease of this node,
domain/liveness.py, is renewed on time); ``actor`` is ``{"atespace", "name"}`` of the sandbox on
the worker (running or exited) or null, ``sandbox_state`` ``idle``, ``running`` or ``exited``,
``egress_active`` whether that actor had outbound traffic through the node's egress proxy since
the last beat or has some in flight (``atelet.egress.in_flight``; the API counts it as activity).

The API answers ``{"node", "workers", "terminate": [{"worker", "actor": {"atespace", "name"}}]}``:
sandboxes the control plane no longer places here (e.g. an actor reverted while this node was
silent). Each is fenced in the background (``Node.fence``: terminated only if that actor is still
on that worker and no operation is in flight there; one fence per worker at a time). An answer without
``terminate`` (an older API) or with a body that is not JSON fences nothing.

Failures are logged and retried at the next beat; this loop never raises (except on cancellation).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx

from atelet.node import Node

log = logging.getLogger(__name__)


def node_document(node: Node, egress_active: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """The JSON body of the PUT; ``egress_active``: the workers whose actor had outbound traffic
    since the last heartbeat or has some in flight (``EgressProxy.active_workers``)."""
    return {
        "address": node.settings.advertise,
        "runsc_version": node.runsc_version,
        "workers": [
            {
                "name": w.name,
                "pool": w.pool.name,
                "ip": node.settings.advertise_worker_ip or w.net.worker_ip,
                "sandbox_class": w.pool.sandbox_class,
                "runtime_version": node.table.runtime_version(w),
                "labels": dict(w.pool.labels),
                "places": w.pool.places,
                "cpu_millis": w.pool.cpu_millis,
                "memory_bytes": w.pool.memory_bytes,
                "actor": {"atespace": w.actor[0], "name": w.actor[1]} if w.actor else None,
                "sandbox_state": w.state,
                "egress_active": w.name in egress_active,
            }
            for w in node.workers.values()
        ],
    }


async def register_once(client: httpx.AsyncClient, node: Node) -> dict[str, Any] | None:
    """One PUT; the answer's JSON object on a 2xx answer ({} when it is not one), else None."""
    url = f"{node.settings.api_server.rstrip('/')}/v1/nodes/{node.settings.node}"  # type: ignore[union-attr]
    egress_active: set[str] = set()
    if node.egress_active is not None:
        try:
            egress_active = await node.egress_active()
        except Exception:  # never the heartbeat's end: without it the node's lease runs out
            log.exception("egress activity could not be read for this heartbeat")
    try:
        response = await client.put(url, json=node_document(node, egress_active))
    except httpx.HTTPError as exc:
        log.warning("registration at %s failed: %s", url, exc)
        return None
    if not response.is_success:
        log.warning("registration at %s answered %s: %s", url, response.status_code, response.text[:200])
        return None
    try:
        answer = response.json()
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def fence_requests(answer: dict[str, Any]) -> list[tuple[str, tuple[str, str]]]:
    """The well-formed (worker, (atespace, name)) entries of the answer's ``terminate`` list."""
    entries = answer.get("terminate") or []
    if not isinstance(entries, list):
        log.warning("heartbeat answer: terminate is not a list: %r", entries)
        return []
    requests = []
    for entry in entries:
        actor = entry.get("actor") if isinstance(entry, dict) else None
        if (isinstance(actor, dict) and isinstance(entry.get("worker"), str)
                and isinstance(actor.get("atespace"), str) and isinstance(actor.get("name"), str)):
            requests.append((entry["worker"], (actor["atespace"], actor["name"])))
        else:
            log.warning("heartbeat answer: malformed terminate entry %r", entry)
    return requests


class Fences:
    """The fences the heartbeat answers ask for, each run as a task of its own (one per worker at
    a time), so that terminating a sandbox never holds up the next heartbeat."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.running: dict[str, asyncio.Task[None]] = {}

    def start(self, worker: str, actor: tuple[str, str]) -> None:
        """Fence ``actor`` on ``worker`` unless a fence of that worker is under way (the next
        heartbeat asks again if it is still needed)."""
        task = self.running.get(worker)
        if task is not None and not task.done():
            return
        self.running[worker] = asyncio.create_task(self._fence(worker, actor))

    async def _fence(self, worker: str, actor: tuple[str, str]) -> None:
        try:
            await self.node.fence(worker, actor)
        except Exception:  # one failed fence must not stop the others; asked again next beat
            log.exception("fence of %s/%s on %s failed", *actor, worker)

    def cancel(self) -> None:
        """Cancel the fences under way (at shutdown)."""
        for task in self.running.values():
            task.cancel()


async def heartbeat_loop(node: Node, auth: httpx.Auth) -> None:
    """Registers now and then every ``heartbeat_seconds`` until cancelled; fences what it is told to.

    Beats keep a fixed cadence: the wait after a beat is the interval less the time the beat
    took (none when it took longer). ``auth`` proves the node's identity on each request
    (``atelet.node_identity``).
    """
    registered = False
    interval = node.settings.heartbeat_seconds
    fences = Fences(node)
    loop = asyncio.get_running_loop()
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(5.0), auth=auth) as client:
            while True:
                started = loop.time()
                answer = await register_once(client, node)
                if answer is not None and not registered:
                    log.info("registered node %s with %s", node.settings.node, node.settings.api_server)
                registered = answer is not None
                for worker, actor in fence_requests(answer or {}):
                    fences.start(worker, actor)
                await asyncio.sleep(max(0.0, interval - (loop.time() - started)))
    finally:
        fences.cancel()
