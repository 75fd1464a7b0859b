"""The long-lived exchanges open now (WebSockets, event streams), which the router ends itself.

A WebSocket or a ``text/event-stream`` response never ends on its own, so uvicorn's graceful
shutdown (wait for responses to finish, then cancel them after ``timeout_graceful_shutdown``)
would hold each one open until the timeout and then cut it off: a hang, then a broken stream.
Each such exchange registers here while it runs; at shutdown the router ends them all at once,
each the clean way for its kind (a WebSocket with close code 1001 "going away" to the client
and to the worker, an event stream with the end of its chunked body), and waits a bounded time
for them to finish before uvicorn closes what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator

from router.core.activity import Activity, Stream

GOING_AWAY = 1001  # WebSocket close code: the endpoint is going away (RFC 6455 section 7.4.1)
SHUTDOWN_REASON = "the router is restarting; connect again"


class Session:
    """One open exchange. The router sets ``ended`` to tell it to end now.

    Attributes:
        actor: Key (``atespace/name``) of the actor it reaches.
        ended: Set when the router ends the exchange (its relay then closes both sides).
        reason: Why it was ended, for the client (a WebSocket close reason, at most 123 bytes).
    """

    def __init__(self, actor: str) -> None:
        self.actor = actor
        self.ended = asyncio.Event()
        self.reason = ""

    def end(self, reason: str) -> None:
        """Ask the exchange to end, for ``reason``."""
        if not self.ended.is_set():
            self.reason = reason
            self.ended.set()


class Sessions:
    """The exchanges open now.

    Attributes:
        closing: Whether the router is stopping (new exchanges are refused).
    """

    def __init__(self) -> None:
        self._open: set[Session] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self.closing = False

    def __len__(self) -> int:
        return len(self._open)

    @contextlib.contextmanager
    def open(self, actor: str) -> Iterator[Session]:
        """Register an exchange for the duration of the block.

        Args:
            actor: Key of the actor it reaches.

        Yields:
            The session; already ended when the router is stopping.
        """
        session = Session(actor)
        if self.closing:
            session.end(SHUTDOWN_REASON)
        self._open.add(session)
        self._idle.clear()
        try:
            yield session
        finally:
            self._open.discard(session)
            if not self._open:
                self._idle.set()

    def end_actor(self, actor: str, reason: str) -> int:
        """End the open exchanges of one actor (for a drain before its checkpoint).

        Returns:
            How many were asked to end.
        """
        ending = [s for s in self._open if s.actor == actor]
        for session in ending:
            session.end(reason)
        return len(ending)

    async def end_all(self, timeout_seconds: float) -> bool:
        """Stop: end every exchange and refuse new ones; wait until they have finished.

        Args:
            timeout_seconds: How long to wait for them to finish closing.

        Returns:
            True when all finished in time (those left are cut off by the server's shutdown).
        """
        self.closing = True
        for session in list(self._open):
            session.end(SHUTDOWN_REASON)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout_seconds)
        return not self._open


class StreamMarks:
    """The activity of one exchange that becomes an open stream (a WebSocket, an event stream):
    ``opened`` marks its flight a stream (router.core.activity: it counts as a request in
    flight only while it moves bytes, unless open streams keep actors awake) and gives the
    callback to call each time bytes move (at most one mark a second reaches the heartbeat).

    Args:
        activity: The replica's activity (``RouterCore.activity``).
        flight: The exchange's drain flight.
    """

    def __init__(self, activity: Activity, flight: Stream) -> None:
        self.activity = activity
        self.flight = flight

    def opened(self) -> Callable[[], None]:
        """The stream is open now: its flight is a stream that just moved bytes; returns ``moved``."""
        self.flight.stream = True
        self.activity.moved(self.flight)
        return self.moved

    def moved(self) -> None:
        """Bytes moved through the stream, either way."""
        self.activity.moved(self.flight)
