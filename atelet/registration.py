"""Registration and heartbeats with ate-api-server.

When ``api_server`` is set: ``PUT {api_server}/v1/nodes/{node}`` with JSON
``{"address", "runsc_version", "workers": [{"name", "pool", "ip", "sandbox_class", "labels",
"places", "cpu_millis", "memory_bytes"}]}`` at start and every ``heartbeat_seconds``. Failures
are logged and retried at the next beat; this loop never raises (except on cancellation).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx

from atelet.sandboxes import Node

log = logging.getLogger(__name__)


def node_document(node: Node) -> dict[str, Any]:
    """The JSON body of the PUT."""
    return {
        "address": node.settings.advertise,
        "runsc_version": node.runsc_version,
        "workers": [
            {
                "name": w.name,
                "pool": w.pool.name,
                "ip": w.net.worker_ip,
                "sandbox_class": w.pool.sandbox_class,
                "labels": dict(w.pool.labels),
                "places": w.pool.places,
                "cpu_millis": w.pool.cpu_millis,
                "memory_bytes": w.pool.memory_bytes,
            }
            for w in node.workers.values()
        ],
    }


async def register_once(client: httpx.AsyncClient, node: Node) -> bool:
    """One PUT; True on a 2xx answer."""
    url = f"{node.settings.api_server.rstrip('/')}/v1/nodes/{node.settings.node}"  # type: ignore[union-attr]
    try:
        response = await client.put(url, json=node_document(node))
    except httpx.HTTPError as exc:
        log.warning("registration at %s failed: %s", url, exc)
        return False
    if response.is_success:
        return True
    log.warning("registration at %s answered %s: %s", url, response.status_code, response.text[:200])
    return False


async def heartbeat_loop(node: Node) -> None:
    """Registers now and then every ``heartbeat_seconds`` until cancelled."""
    registered = False
    async with httpx.AsyncClient(timeout=httpx.Timeout(5.0)) as client:
        while True:
            ok = await register_once(client, node)
            if ok and not registered:
                log.info("registered node %s with %s", node.settings.node, node.settings.api_server)
            registered = ok
            await asyncio.sleep(node.settings.heartbeat_seconds)
