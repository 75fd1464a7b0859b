"""The cache of RUNNING actors and its invalidation by Postgres LISTEN/NOTIFY.

``ActorCache`` maps ``"<atespace>/<name>"`` to the ``Upstream`` the actor serves on. It only
accepts entries while ``CacheInvalidator`` holds a live LISTEN on ``ate_actor_changes``: every
notification for an actor (payload ``"<atespace>/<name> <STATE>"``) drops its entry, and a lost
LISTEN connection clears everything and turns caching off until LISTEN is back.

An entry is put through a ``Ticket`` taken before the resume call whose answer it caches; a
notification for that actor (or a clear) arriving while the call runs voids the ticket, so a
stale answer never lands in the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from domain.changes import ACTOR_CHANGES_CHANNEL, ActorChange, parse_actor_change
from router.core.upstream import Upstream
from store.listen import Listener

log = logging.getLogger(__name__)

MAX_ENTRIES = 200_000
HEALTH_INTERVAL_SECONDS = 5.0


@dataclass(eq=False, slots=True)
class Ticket:
    """Permission to cache the answer of one resume call.

    Attributes:
        key: Actor key ``"<atespace>/<name>"``.
        epoch: Cache epoch when taken; a clear bumps the epoch and voids older tickets.
        stale: Set when a notification for ``key`` arrived after the ticket was taken.
    """

    key: str
    epoch: int
    stale: bool = field(default=False)


class ActorCache:
    """In-memory map of RUNNING actors to their upstream address.

    Attributes:
        enabled: Whether entries are accepted (a LISTEN connection is live).
    """

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.enabled = False
        self._entries: dict[str, Upstream] = {}
        self._tickets: dict[str, list[Ticket]] = {}
        self._epoch = 0
        self._max = max_entries
        self.usable: Callable[[], bool] = lambda: True
        """Whether entries may be read and put besides ``enabled`` (the replica holds a lease
        with the control plane: router.core.registration)."""
        self.on_change: list[Callable[[ActorChange | None], None]] = []
        """Called with the change when a notification names an actor, with None when everything
        is forgotten (the access gate forgets what it knew of the actor's template)."""

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> Upstream | None:
        """Return the cached upstream of an actor, or None."""
        entry = self._entries.get(key)
        return entry if entry is None or self.usable() else None

    def begin(self, key: str) -> Ticket:
        """Take a ticket before asking the API about ``key``; pair with ``end``."""
        ticket = Ticket(key, self._epoch)
        self._tickets.setdefault(key, []).append(ticket)
        return ticket

    def end(self, ticket: Ticket) -> None:
        """Release a ticket taken with ``begin``."""
        tickets = self._tickets.get(ticket.key)
        if tickets is None:
            return
        with contextlib.suppress(ValueError):
            tickets.remove(ticket)
        if not tickets:
            del self._tickets[ticket.key]

    def put(self, ticket: Ticket, upstream: Upstream) -> bool:
        """Cache a RUNNING actor's upstream unless the ticket was voided or caching is off.

        Args:
            ticket: The ticket taken before the resume call that returned ``upstream``.
            upstream: Where the actor serves.

        Returns:
            True when cached.
        """
        if not self.enabled or ticket.stale or ticket.epoch != self._epoch or not self.usable():
            return False
        if ticket.key not in self._entries and len(self._entries) >= self._max:
            self._entries.pop(next(iter(self._entries)))
        self._entries[ticket.key] = upstream
        return True

    def drop(self, key: str) -> None:
        """Forget an actor and void tickets in flight for it."""
        self._entries.pop(key, None)
        for ticket in self._tickets.get(key, ()):
            ticket.stale = True

    def clear(self) -> None:
        """Forget every actor and void every ticket in flight."""
        self._entries.clear()
        self._epoch += 1

    def on_notification(self, payload: str) -> None:
        """Apply one ``ate_actor_changes`` payload ``"<atespace>/<name> <STATE>"``.

        Args:
            payload: Notification payload; one that names no actor clears everything.
        """
        change = parse_actor_change(payload)
        if change is not None:
            self.drop(change.actor.key)
        else:
            log.warning("unparsable %s payload %r: clearing the cache", ACTOR_CHANGES_CHANNEL, payload)
            self.clear()
        for listener in self.on_change:
            listener(change)


class CacheInvalidator:
    """Keeps a LISTEN on ``ate_actor_changes`` alive (``store.listen.Listener``) and feeds it into
    an ``ActorCache``.

    While the connection is live the cache is enabled. When it is lost (termination, failed
    health check) the cache is disabled and cleared, and the connection is re-made with
    backoff (0.1 s doubling to 5 s); the cache is re-enabled once LISTEN is back.

    Args:
        dsn: Postgres DSN.
        cache: The cache to invalidate.
    """

    def __init__(self, dsn: str, cache: ActorCache) -> None:
        self.dsn = dsn
        self.cache = cache
        self.connected = asyncio.Event()
        self._listener: Listener | None = None
        self.channels: dict[str, Callable[[str], None]] = {}
        """More channels to LISTEN on over the same connection, each with its payload handler
        (the router's drains); set before ``start``."""

    def start(self) -> None:
        """Start the background LISTEN loop."""
        if self._listener is None:
            self._listener = Listener(
                self.dsn, {ACTOR_CHANGES_CHANNEL: self.cache.on_notification, **self.channels}, name="router",
                on_live=self._live, on_lost=self._lost, health_seconds=HEALTH_INTERVAL_SECONDS,
            )  # fmt: skip
            self.connected = self._listener.connected
            self._listener.start()

    async def stop(self) -> None:
        """Stop the loop, close the connection and disable the cache."""
        if self._listener is not None:
            await self._listener.stop()
            self._listener = None
        self._lost()

    def _live(self) -> None:
        self.cache.clear()
        self.cache.enabled = True
        log.info("listening on %s: caching RUNNING actors", ACTOR_CHANGES_CHANNEL)

    def _lost(self) -> None:
        self.cache.enabled = False
        self.cache.clear()
        self.connected.clear()
