"""The api-server's LISTEN on ``ate_actor_changes``: a resume answers when its actor is RUNNING,
a sync suspend when it is SUSPENDED.

The trigger on ``actors`` NOTIFYs ``"<atespace>/<name> <STATE>"`` at the commit of every change
(store/migrations). A request registers what it waits for before it starts (or
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

from domain.changes import ACTOR_CHANGES_CHANNEL, parse_actor_change
from store.listen import Listener

log = logging.getLogger(__name__)

CONNECT_SECONDS = 5.0
"""Bound of the LISTEN connection's connect and of its health check."""

HEALTH_SECONDS = 10.0
"""How often the LISTEN connection is checked with a query (a half-open one never ends)."""


class ActorChanges:
    """One LISTEN connection (`store.listen.Listener`); futures resolved when an actor reaches a
    state. While the LISTEN is lost, resumes wait for their workflows until it is back.

    Args:
        dsn: Postgres DSN.

    Attributes:
        connected: Set while the LISTEN is live.
    """

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._waiting: dict[tuple[str, str], set[asyncio.Future[None]]] = {}
        self._listener = Listener(
            dsn, {ACTOR_CHANGES_CHANNEL: self.on_notification}, name="api-server",
            health_seconds=HEALTH_SECONDS, connect_seconds=CONNECT_SECONDS,
        )  # fmt: skip
        self.connected = self._listener.connected

    def start(self) -> None:
        """Start the LISTEN loop (re-made with backoff when lost)."""
        self._listener.start()

    async def stop(self) -> None:
        """Stop the loop and close its connection."""
        await self._listener.stop()

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
        change = parse_actor_change(payload)
        if change is None:
            return
        for future in self._waiting.get((change.actor.key, change.state), ()):
            if not future.done():
                future.set_result(None)
