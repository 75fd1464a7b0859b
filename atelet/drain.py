"""Draining the node before it stops (``drain_on_sigterm``: Kubernetes pod eviction).

``drain(node, settings, auth)``: ``POST {api_server}/v1/nodes/{node}/drain`` with ``{"deadline_seconds":
N}`` and the node's bearer token (retried with backoff until 2xx; the API then suspends the node's actors through SuspendActor
workflows, which call this atelet's Checkpoint, and takes no new actors onto its workers), then
waits until no sandbox runs and no operation is in flight on any worker for ``SETTLE_SECONDS``,
or until the deadline plus ``GRACE_SECONDS`` passed. The caller then stops the atelet as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import httpx

from atelet.node import Node
from atelet.settings import AteletSettings

log = logging.getLogger(__name__)

GRACE_SECONDS = 10.0
SETTLE_SECONDS = 1.0
POLL_SECONDS = 0.2
# How long an idle node waits for the API to take the drain call before it stops anyway.
NOTIFY_WAIT_SECONDS = 5.0


async def notify(settings: AteletSettings, auth: httpx.Auth) -> None:
    """POSTs the drain request (``auth``: the node's identity) until the API answers 2xx (or the caller cancels)."""
    assert settings.api_server
    url = f"{settings.api_server.rstrip('/')}/v1/nodes/{settings.node}/drain"
    body = {"deadline_seconds": int(settings.drain_deadline_seconds)}
    backoff = 0.2
    async with httpx.AsyncClient(timeout=httpx.Timeout(5.0), auth=auth) as client:
        while True:
            try:
                response = await client.post(url, json=body)
                if response.is_success:
                    log.info("drain: %s accepted the drain of %s: %s", url, settings.node, response.text[:200])
                    return
                log.warning("drain: %s answered %s: %s", url, response.status_code, response.text[:200])
            except httpx.HTTPError as exc:
                log.warning("drain: POST %s failed: %s", url, exc)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)


async def drain(node: Node, settings: AteletSettings, auth: httpx.Auth) -> None:
    """Asks the API to drain the node (``auth``: its identity) and returns once the node is empty or the deadline passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.drain_deadline_seconds + GRACE_SECONDS
    log.info("drain: draining node %s (deadline %.0fs); a second SIGTERM stops at once",
             settings.node, settings.drain_deadline_seconds)
    notifier = asyncio.create_task(notify(settings, auth)) if settings.api_server else None
    if notifier is None:
        log.warning("drain: no api_server configured; waiting for the sandboxes to be checkpointed or stopped")
    try:
        if notifier is not None:
            await asyncio.wait({notifier}, timeout=NOTIFY_WAIT_SECONDS)
        idle_since: float | None = None
        while loop.time() < deadline:
            now = loop.time()
            if node.idle():
                idle_since = idle_since if idle_since is not None else now
                if now - idle_since >= SETTLE_SECONDS:
                    log.info("drain: no sandbox runs on node %s any more", settings.node)
                    return
            else:
                idle_since = None
            await asyncio.sleep(POLL_SECONDS)
        running = [w.name for w in node.workers.values() if w.state == "running"]
        log.warning("drain: deadline passed with sandboxes still running on %s; terminating them", running)
    finally:
        if notifier is not None and not notifier.done():
            notifier.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await notifier
