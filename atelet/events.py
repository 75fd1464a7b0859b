"""Node events sent to ate-api-server: a sandbox that exited on its own.

``POST {api_server}/v1/nodes/{node}/events`` with JSON ``{"worker": "<worker name>", "actor":
{"atespace", "name"}, "event": "exited", "reason": "<one line>"}`` and the node's bearer token
(``atelet.node_identity``). Events are queued and sent in
order by one background task, each retried with exponential backoff (0.2 s doubling to 10 s) until
the API answers 2xx; reporting never blocks the caller. Without ``api_server`` events are only
logged. Events still queued when the atelet stops are flushed for at most ``flush`` seconds, then
dropped (the heartbeat still shows the exited worker's actor).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import httpx

log = logging.getLogger(__name__)

FIRST_BACKOFF = 0.2
MAX_BACKOFF = 10.0


class EventReporter:
    """Queues events and delivers them to the API server (``run`` is the delivery task); ``auth``
    proves the node's identity on each request."""

    def __init__(self, api_server: str | None, node: str, auth: httpx.Auth) -> None:
        self.auth = auth
        self.url = f"{api_server.rstrip('/')}/v1/nodes/{node}/events" if api_server else None
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def exited(self, worker: str, actor: tuple[str, str], reason: str) -> None:
        """Reports that ``actor``'s sandbox on ``worker`` exited on its own (returns at once)."""
        event = {"worker": worker, "actor": {"atespace": actor[0], "name": actor[1]},
                 "event": "exited", "reason": reason}
        if self.url is None:
            log.info("event (no api_server to send it to): %s", event)
            return
        self._queue.put_nowait(event)

    async def run(self) -> None:
        """Delivers queued events in order until cancelled."""
        async with httpx.AsyncClient(timeout=httpx.Timeout(5.0), auth=self.auth) as client:
            while True:
                event = await self._queue.get()
                try:
                    await self._deliver(client, event)
                finally:
                    self._queue.task_done()

    async def _deliver(self, client: httpx.AsyncClient, event: dict[str, Any]) -> None:
        assert self.url is not None
        backoff = FIRST_BACKOFF
        while True:
            try:
                response = await client.post(self.url, json=event)
                if response.is_success:
                    log.info("event %s for %s/%s on %s delivered: %s", event["event"], event["actor"]["atespace"],
                             event["actor"]["name"], event["worker"], response.text[:200])
                    return
                log.warning("event POST %s answered %s: %s; retrying in %.1fs", self.url, response.status_code,
                            response.text[:200], backoff)
            except httpx.HTTPError as exc:
                log.warning("event POST %s failed: %s; retrying in %.1fs", self.url, exc, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)

    async def flush(self, timeout: float) -> None:
        """Waits up to ``timeout`` seconds for the queue to empty (needs ``run`` running)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout)
