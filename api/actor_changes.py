"""The api-server's LISTEN on ``ate_actor_changes``: a resume answers when its actor is RUNNING,
a sync suspend when it is SUSPENDED.

The trigger on ``actors`` NOTIFYs ``"<atespace>/<name> <STATE>"`` at the commit of every change
(activities/store/migrations). A request registers what it waits for before it starts (or
attaches to) the workflow, and answers as soon as the commit of the operation's last step (the
RUNNING commit of ``place_and_restore``, the SUSPENDED commit of ``atelet_checkpoint``) says so,
instead of waiting for the workflow to complete and for Temporal to hand its result back (issue
14: "The router may learn that an actor is RUNNING from the store's notification"). The
workflow's result is still awaited alongside: without the LISTEN (lost, re-making) nothing is
faster, and nothing is wrong."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import asyncpg

log = logging.getLogger(__name__)

CHANNEL = "ate_actor_changes"
"""The NOTIFY channel of actor changes; payload ``<atespace>/<name> <STATE>``."""

RECONNECT_SECONDS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
"""Waits before re-making a lost LISTEN connection (the last repeats)."""

CONNECT_SECONDS = 5.0
"""Bound of the LISTEN connection's connect and of its health check."""

HEALTH_SECONDS = 10.0
"""How often the LISTEN connection is checked with a query (a half-open one never ends)."""


class ActorChanges:
    """One LISTEN connection; futures resolved when an actor reaches a state.

    Args:
        dsn: Postgres DSN.

    Attributes:
        connected: Set while the LISTEN is live.
    """

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.connected = asyncio.Event()
        self._waiting: dict[tuple[str, str], set[asyncio.Future[None]]] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the LISTEN loop (re-made with backoff when lost)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="ate-api-actor-changes")

    async def stop(self) -> None:
        """Stop the loop and close its connection."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    @contextlib.contextmanager
    def expecting(self, key: str, state: str) -> Any:
        """For the block: a future resolved when actor ``key`` (``atespace/name``) is committed
        in ``state``; never resolved when the LISTEN is not live."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiting.setdefault((key, state), set())
        waiters.add(future)
        try:
            yield future
        finally:
            waiters.discard(future)
            if not waiters:
                self._waiting.pop((key, state), None)
            if not future.done():
                future.cancel()

    def on_notification(self, payload: str) -> None:
        """Resolve the futures waiting for ``payload`` (``<atespace>/<name> <STATE>``)."""
        key, _, state = payload.strip().partition(" ")
        for future in self._waiting.get((key, state), ()):
            if not future.done():
                future.set_result(None)

    async def _run(self) -> None:
        attempt = 0
        while True:
            connection: Any = None
            try:
                connection = await asyncpg.connect(self.dsn, timeout=CONNECT_SECONDS)
                lost = asyncio.Event()
                connection.add_termination_listener(lambda _c, lost=lost: lost.set())
                await connection.add_listener(CHANNEL, lambda _c, _pid, _channel, payload: self.on_notification(payload))
                self.connected.set()
                attempt = 0
                while not lost.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), HEALTH_SECONDS)
                    if not lost.is_set():  # a half-open connection answers no query
                        await connection.fetchval("SELECT 1", timeout=CONNECT_SECONDS)
                log.warning("LISTEN %s lost; resumes wait for their workflows until it is back", CHANNEL)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # any failure: the loop re-makes the LISTEN
                log.warning("LISTEN %s: %s; resumes wait for their workflows until it is back", CHANNEL, error)
            finally:
                self.connected.clear()
                if connection is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(connection.close(), 2)
            await asyncio.sleep(RECONNECT_SECONDS[min(attempt, len(RECONNECT_SECONDS) - 1)])
            attempt += 1
