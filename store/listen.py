"""One PostgreSQL LISTEN connection kept alive: the only way a process outside `store/` hears the
store's NOTIFY channels (`domain.changes`).

The api-server (actor changes: a resume answers at the RUNNING commit) and the router (its
RUNNING-actor cache and drain requests) each hold one. A `Listener` connects, LISTENs on its
channels, checks the connection with a query every `health_seconds` (a half-open connection
never ends by itself), and when the connection is lost or fails it says so through `on_lost` and
connects again after a backoff. Notifications are delivered while `connected` is set; a reader
that caches must treat the time between `on_lost` and the next `on_live` as "anything may have
changed".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import asyncpg

log = logging.getLogger(__name__)

RECONNECT_SECONDS = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0)
"""Waits before re-making a lost LISTEN connection, in seconds (the last repeats)."""


class Listener:
    """A LISTEN connection on some channels, re-made with backoff when lost.

    Args:
        dsn: PostgreSQL DSN.
        handlers: channel name -> function called with each payload (text), on the event loop.
        name: what listens, for log lines and the task's name (e.g. `router`).
        on_live: called each time the LISTEN is (again) in place, before `connected` is set.
        on_lost: called each time it is lost or could not be made (also at `stop`).
        health_seconds: how often a live connection is checked with `SELECT 1` (seconds).
        connect_seconds: bound of a connect and of a health check (seconds).
        reconnect_seconds: waits before each new attempt (seconds; the last repeats).

    Attributes:
        connected: set while the LISTEN is live.
    """

    def __init__(
        self,
        dsn: str,
        handlers: Mapping[str, Callable[[str], None]],
        *,
        name: str,
        on_live: Callable[[], None] | None = None,
        on_lost: Callable[[], None] | None = None,
        health_seconds: float = 10.0,
        connect_seconds: float = 5.0,
        reconnect_seconds: Sequence[float] = RECONNECT_SECONDS,
    ) -> None:
        self.dsn = dsn
        self.handlers = dict(handlers)
        self.name = name
        self.on_live = on_live
        self.on_lost = on_lost
        self.health_seconds = health_seconds
        self.connect_seconds = connect_seconds
        self.reconnect_seconds = tuple(reconnect_seconds) or (1.0,)
        self.connected = asyncio.Event()
        self.server_pid: int | None = None
        """The PostgreSQL backend of the live LISTEN connection (None when there is none)."""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the LISTEN loop in the background (once)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"ate-{self.name}-listen")

    async def stop(self) -> None:
        """Stop the loop and close its connection; `on_lost` is called."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        self._lost()

    def _lost(self) -> None:
        self.connected.clear()
        self.server_pid = None
        if self.on_lost is not None:
            self.on_lost()

    async def _run(self) -> None:
        attempt = 0
        channels = ", ".join(self.handlers)
        while True:
            connection: Any = None
            try:
                connection = await asyncpg.connect(self.dsn, timeout=self.connect_seconds)
                lost = asyncio.Event()
                connection.add_termination_listener(lambda _connection, lost=lost: lost.set())
                for channel, handler in self.handlers.items():
                    await connection.add_listener(channel, _payload_to(handler))
                self.server_pid = connection.get_server_pid()
                if self.on_live is not None:
                    self.on_live()
                self.connected.set()
                attempt = 0
                log.info("%s: listening on %s", self.name, channels)
                while not lost.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), self.health_seconds)
                    if not lost.is_set():
                        await connection.fetchval("SELECT 1", timeout=self.connect_seconds)
                log.warning("%s: the LISTEN connection on %s was lost; making it again", self.name, channels)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # any failure: the loop makes the LISTEN again
                wait = self.reconnect_seconds[min(attempt, len(self.reconnect_seconds) - 1)]
                log.warning("%s: LISTEN on %s failed (%s); trying again in %.1f s", self.name, channels, error, wait)
            finally:
                self._lost()
                if connection is not None:
                    connection.terminate()
            await asyncio.sleep(self.reconnect_seconds[min(attempt, len(self.reconnect_seconds) - 1)])
            attempt += 1


def _payload_to(handler: Callable[[str], None]) -> Callable[[Any, int, str, str], None]:
    """An asyncpg listener that passes only the payload to `handler`."""
    return lambda _connection, _pid, _channel, payload: handler(payload)
