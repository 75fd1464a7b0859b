"""Which actors had traffic on this router replica since its last heartbeat (issue 27: idleness
is judged across every replica, each reporting its own traffic in its heartbeat).

An actor is *active* on a replica over one heartbeat interval when a request of it started or
ended there (``mark``, called by the drain gate as a request enters and leaves its flight, and
by the decision core as one parks), when bytes moved through one of its WebSockets or event
streams (``moved``, at most once a second per stream: the hot path pays a clock read and a
comparison per message), or when a request of it is in flight or parked there at heartbeat time
(``take``). The registration sends the keys in its heartbeat (router.core.registration) and the
API sets their ``last_active_at``.

An open stream is a request in flight for as long as it is open only when
``open_streams_keep_awake`` is set; otherwise it counts while it moves bytes: it is *silent*
once no byte moved for ``STREAM_QUIET_SECONDS``. The same rule says whether the replica is
*busy* with an actor when an idle action's drain arrives (``busy``): a request in flight or
parked, or a stream that is not silent (or any open stream, with the setting).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from domain.operations.router_drain import ROUTER_HEARTBEAT_SECONDS

MARK_SECONDS = 1.0
"""A stream moving bytes marks its actor active at most this often (seconds)."""

STREAM_QUIET_SECONDS = ROUTER_HEARTBEAT_SECONDS
"""An open stream with no byte moved for this long is silent (seconds)."""


class Stream(Protocol):
    """What the activity rules read of a request in flight (router.core.drain.Flight)."""

    key: str
    stream: bool
    moved_at: float
    marked_at: float


class Activity:
    """The actors with traffic on this replica since the last ``take``.

    Args:
        open_streams_keep_awake: Whether an open stream counts as a request in flight while it
            is open (the router setting of that name), else only while it moves bytes.
        clock: Monotonic seconds (``time.monotonic``; tests give their own).
        reported: Whether anything takes the marks (a replica that does not register keeps none:
            they would only pile up).
    """

    def __init__(
        self, open_streams_keep_awake: bool = False, clock: Callable[[], float] = time.monotonic, reported: bool = True
    ) -> None:
        self.open_streams_keep_awake = open_streams_keep_awake
        self._now = clock
        self._reported = reported
        self._marked: set[str] = set()
        self._parked: Counter[str] = Counter()

    def mark(self, key: str) -> None:
        """Actor ``key`` had traffic now (a request started or ended)."""
        if self._reported:
            self._marked.add(key)

    def mark_all(self, keys: Iterable[str]) -> None:
        """Mark ``keys`` again (a heartbeat that did not reach the API: they go with the next)."""
        self._marked.update(keys)

    def moved(self, flight: Stream) -> None:
        """Bytes moved through ``flight`` (a stream): it is not silent, and its actor is marked
        active at most once per ``MARK_SECONDS``."""
        now = self._now()
        flight.moved_at = now
        if now - flight.marked_at >= MARK_SECONDS:
            flight.marked_at = now
            self.mark(flight.key)

    def parked(self, key: str, delta: int) -> None:
        """A request of actor ``key`` began (``delta`` 1) or ended (-1) waiting to reach it."""
        self._parked[key] += delta
        if self._parked[key] <= 0:
            del self._parked[key]
        if delta > 0:
            self.mark(key)

    def counts(self, flight: Stream) -> bool:
        """Whether ``flight`` counts as a request in flight: not a stream, a stream while the
        setting keeps streams awake, or a stream that moved bytes within ``STREAM_QUIET_SECONDS``."""
        if not flight.stream or self.open_streams_keep_awake:
            return True
        return self._now() - flight.moved_at < STREAM_QUIET_SECONDS

    def busy(self, key: str, flights: Iterable[Stream]) -> bool:
        """Whether a request of actor ``key`` is parked here, or one of its ``flights`` counts."""
        return key in self._parked or any(self.counts(f) for f in flights)

    def take(self, flights: Mapping[str, Iterable[Stream]]) -> set[str]:
        """The actors active since the last ``take`` (marked, parked now, or with a flight that
        counts now, from ``flights`` by actor key); the marks start again empty."""
        active = self._marked
        self._marked = set()
        active.update(self._parked)
        active.update(key for key, running in flights.items() if any(self.counts(f) for f in running))
        return active
