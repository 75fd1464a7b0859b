"""The drain of an actor's traffic before its checkpoint, on this router replica.

SuspendActor and PauseActor tell every router replica to drain an actor before the atelet
checkpoints it (``router.core.registration`` brings the drain in and acknowledges it). ``DrainGate``
carries it out:

1. the actor is dropped from the cache, the resume call in flight for it is no longer shared
   with new requests, and every upstream address obtained before this moment becomes unusable;
2. requests for it that arrive meanwhile are held (``hold``) and then park as usual: they are
   served after the resume;
3. the requests in flight to its worker get ``drain_timeout_seconds`` to finish; then the
   connections still open are shut (those responses break off) and the step waits a little
   more (``settle_seconds``) for their requests to leave;
4. only then is the drain acknowledged.

A data path that sends requests elsewhere too (nginx, router.nginx.drain) gives its own part of
the sequence (``DrainElsewhere``), run at the same time as step 3 on this gate's flights; the
sequence itself is written here once. How a flight's connection is shut (``cut``) and how the
open WebSockets and event streams end (``end_sessions``) are the data path's mechanics, handed in.

An idle action's drain (``drain_if_idle``) must not cut a request: a replica busy with the
actor (router.core.activity: a request in flight or parked, a stream moving bytes, or any open
stream with ``open_streams_keep_awake``; the data path's own requests too, ``DrainElsewhere.busy``)
refuses it, doing nothing; otherwise it is carried out as above. A request that arrives after the
check is held and parks like any other (served after the action).

The guarantee that no request of an actor that left RUNNING reaches its old worker (which may
host another actor by then) rests on ``enter``: a request may send to an upstream only through a
``Flight`` entered with a ``token`` taken before the upstream was looked up (the cache read, or
the resume call it joined). A drain of the actor since that token makes ``enter`` refuse, and a
drain waits for every flight entered before it. A replica whose lease with the control plane ran
out (``leased`` false) is not waited for by the control plane, so it enters no flight at all
until it has a lease again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from router.core.activity import Activity
from router.core.cache import ActorCache
from router.core.metrics import DRAIN_CUT_REQUESTS, DRAIN_DURATION, DRAIN_HELD, DRAINS
from router.core.resume import Resumer
from router.core.upstream import Upstream

log = logging.getLogger(__name__)

CLEAN = "clean"
CUT = "cut"

DRAIN_REASON = "the actor is being suspended; connect again"
"""The close reason of a WebSocket (or why an event stream ended) at a drain (at most 123 bytes)."""

MAX_REMEMBERED_DRAINS = 100_000
"""Actors whose last drain is remembered; past them the oldest is forgotten and every token
from before it is refused (a lookup again, never a wrong delivery)."""


@dataclass(eq=False)
class Flight:
    """One request allowed to send to an actor's worker, from ``enter`` to ``leave``.

    Attributes:
        key: Actor key ``"<atespace>/<name>"``.
        upstream: Where it sends.
        cut: Set when a drain cut it off (its connection is shut; a connection made later is
            closed at once).
        stream: Set when it became an open WebSocket or event stream (router.core.activity).
        moved_at: When bytes last moved through the stream (monotonic seconds).
        marked_at: When the stream last marked its actor active (monotonic seconds).
    """

    key: str
    upstream: Upstream
    cut: bool = field(default=False)
    stream: bool = field(default=False)
    moved_at: float = field(default=0.0)
    marked_at: float = field(default=float("-inf"))


@dataclass(frozen=True)
class DrainOutcome:
    """What one drain did: its result (``clean`` or ``cut``), the requests it waited for and
    those it cut, and how long it took (seconds)."""

    result: str
    waited_for: int
    cut: int
    seconds: float


class DrainElsewhere(Protocol):
    """A data path's own part of a drain, for the requests it sends itself (nginx's)."""

    where: str
    """How the drain's log line names it (e.g. ``" (nginx)"``)."""

    async def drain(self, drain_id: int, key: str, clock: int, timeout: float, settle: float) -> tuple[int, int]:
        """Drain actor ``key`` there: refuse every route given before ``clock`` (the gate's
        token of this drain), wait up to ``timeout`` seconds for its requests, cut those left
        and wait up to ``settle`` seconds more for them to end.

        Returns:
            (requests waited for, requests cut); failures are logged, not raised.
        """
        ...

    async def busy(self, key: str) -> bool:
        """Whether a request of actor ``key`` is in flight there (an idle action's drain is then
        refused); False when it cannot tell (logged)."""
        ...

    async def active(self) -> set[str]:
        """The actors with traffic there since the last call (router.core.activity's rules);
        empty when it cannot tell (logged)."""
        ...


class DrainGate:
    """Who may send to which actor's worker, and the drains that stop it.

    Args:
        cache: The RUNNING-actor cache (a drain drops the actor).
        resumer: The resumer (a drain unshares the actor's resume call in flight).
        cut: Shuts one flight's worker connection (the data path's upstream client's ``cut``).
        drain_timeout_seconds: How long requests in flight may take to finish once drained.
        settle_seconds: How long cut requests may take to leave (a connect in progress ends
            within the connect timeout).
        leased: Whether this replica may send at all (its lease runs); always True by default.
        end_sessions: Ends the actor's open WebSockets and event streams at once, cleanly, with
            a reason (``Sessions.end_actor``): they never finish on their own.
        elsewhere: The data path's own part of each drain (nginx's), or None.
        activity: The actors with traffic on this replica (marked as requests enter and leave).
    """

    def __init__(
        self,
        cache: ActorCache,
        resumer: Resumer,
        cut: Callable[[Flight], object],
        drain_timeout_seconds: float,
        settle_seconds: float,
        leased: Callable[[], bool] = lambda: True,
        end_sessions: Callable[[str, str], int] = lambda _key, _reason: 0,
        elsewhere: DrainElsewhere | None = None,
        activity: Activity | None = None,
    ) -> None:
        self.cache = cache
        self.activity = activity or Activity()
        self.resumer = resumer
        self.cut = cut
        self.elsewhere = elsewhere
        self.drain_timeout_seconds = drain_timeout_seconds
        self.settle_seconds = settle_seconds
        self.leased = leased
        self.end_sessions = end_sessions
        self._clock = 0
        self._drained_at: dict[str, int] = {}
        self._floor = -1
        self._flights: dict[str, set[Flight]] = {}
        self._emptied: dict[str, asyncio.Event] = {}
        self._draining: dict[str, int] = {}
        self._released: dict[str, asyncio.Event] = {}
        self._running: dict[int, asyncio.Task[DrainOutcome]] = {}

    def token(self) -> int:
        """A token to take before looking up an actor's upstream; give it to ``enter``."""
        return self._clock

    def in_flight(self, key: str) -> int:
        """How many requests are sending to actor ``key``'s worker now."""
        return len(self._flights.get(key, ()))

    def enter(self, key: str, token: int, upstream: Upstream) -> Flight | None:
        """Let one request send to ``upstream`` for actor ``key``, unless the actor was drained
        since ``token`` was taken, is being drained, or this replica has no lease.

        Returns:
            The flight (``leave`` it when the response ends), or None: look the upstream up again.
        """
        stale = token < self._floor or self._drained_at.get(key, -1) > token
        if stale or key in self._draining or not self.leased():
            return None
        flight = Flight(key, upstream)
        self._flights.setdefault(key, set()).add(flight)
        self.activity.mark(key)
        return flight

    def leave(self, flight: Flight) -> None:
        """The flight's request is over (its worker connection is closed)."""
        self.activity.mark(flight.key)
        flights = self._flights.get(flight.key)
        if flights is None:
            return
        flights.discard(flight)
        if not flights:
            del self._flights[flight.key]
            emptied = self._emptied.pop(flight.key, None)
            if emptied is not None:
                emptied.set()

    def busy(self, key: str) -> bool:
        """Whether this gate has a request of actor ``key`` that counts as in flight, or one
        parked for it (router.core.activity)."""
        return self.activity.busy(key, self._flights.get(key, ()))

    async def active(self) -> set[str]:
        """The actors with traffic on this replica since the last call: this gate's (marked,
        parked, in flight) and the data path's elsewhere."""
        keys = self.activity.take(self._flights)
        if self.elsewhere is not None:
            keys |= await self.elsewhere.active()
        return keys

    async def drain_if_idle(self, drain_id: int, key: str) -> DrainOutcome | None:
        """An idle action's drain: None (nothing done) when this replica is busy with actor
        ``key``, here or elsewhere; else ``drain``. This gate is asked again after the data
        path's answer, with no wait between that check and the drain's start."""
        if self.busy(key):
            return None
        if self.elsewhere is not None and await self.elsewhere.busy(key):
            return None
        if self.busy(key):
            return None
        return await self.drain(drain_id, key)

    def draining(self, key: str) -> bool:
        """Whether a drain of actor ``key`` runs now."""
        return key in self._draining

    async def hold(self, key: str) -> None:
        """Wait while actor ``key`` is being drained (counted in ``ate_router_drain_held_requests``)."""
        released = self._released.get(key)
        if released is None:
            return
        DRAIN_HELD.inc()
        try:
            await released.wait()
        finally:
            DRAIN_HELD.dec()

    async def drain(self, drain_id: int, key: str) -> DrainOutcome:
        """Carry out drain ``drain_id`` of actor ``key`` (see the module docstring); a second
        call for the same drain while it runs waits for the first."""
        task = self._running.get(drain_id)
        if task is None:
            task = asyncio.create_task(self._drain(drain_id, key), name=f"ate-router-drain-{drain_id}")
            self._running[drain_id] = task
            task.add_done_callback(lambda _t: self._running.pop(drain_id, None))
        return await asyncio.shield(task)

    async def _drain(self, drain_id: int, key: str) -> DrainOutcome:
        loop = asyncio.get_running_loop()
        started = loop.time()
        self._open_drain(key)
        relayed = "relayed " if self.elsewhere is not None else ""  # this gate's flights, beside nginx's
        ended = self.end_sessions(key, DRAIN_REASON)
        if ended:
            log.info("drain %d of actor %s: %d %sWebSockets or event streams ended", drain_id, key, ended, relayed)
        waited_for = self.in_flight(key)
        cut = 0
        try:
            here = asyncio.create_task(self._wait_then_cut(drain_id, key, relayed))
            try:
                if self.elsewhere is not None:
                    there = await self.elsewhere.drain(
                        drain_id, key, self._clock, self.drain_timeout_seconds, self.settle_seconds
                    )
                    waited_for += there[0]
                    cut += there[1]
            finally:
                cut += await here
        finally:
            self._close_drain(key)
        return self._outcome(drain_id, key, started, waited_for, cut, self.elsewhere.where if self.elsewhere else "")

    async def _wait_then_cut(self, drain_id: int, key: str, relayed: str) -> int:
        """Wait for this gate's flights of actor ``key`` to finish within the drain timeout, then
        cut those left and let them settle; how many were cut."""
        if await self._emptied_within(key, self.drain_timeout_seconds):
            return 0
        flights = list(self._flights.get(key, ()))
        for flight in flights:
            flight.cut = True
            self.cut(flight)
        DRAIN_CUT_REQUESTS.inc(len(flights))
        if not await self._emptied_within(key, self.settle_seconds):
            log.warning("drain %d of actor %s: %d cut %srequests still open", drain_id, key, self.in_flight(key), relayed)
        return len(flights)

    def _open_drain(self, key: str) -> None:
        """A drain of `key` begins: a new clock value (older look-ups are stale), its requests held,
        its cache entry and shared resume dropped."""
        self._clock += 1
        self._drained_at.pop(key, None)
        self._drained_at[key] = self._clock  # insertion order = drain order
        if len(self._drained_at) > MAX_REMEMBERED_DRAINS:
            oldest = next(iter(self._drained_at))
            self._floor = max(self._floor, self._drained_at.pop(oldest))
        self._draining[key] = self._draining.get(key, 0) + 1
        self._released.setdefault(key, asyncio.Event())
        self.cache.drop(key)
        self.resumer.unshare(key)

    def _close_drain(self, key: str) -> None:
        """A drain of `key` ended: when it was the last one, its held requests go on."""
        self._draining[key] -= 1
        if not self._draining[key]:
            del self._draining[key]
            self._released.pop(key).set()

    def _outcome(self, drain_id: int, key: str, started: float, waited_for: int, cut: int, where: str) -> DrainOutcome:
        """The drain's outcome, counted and logged (`where`: "" or " (nginx)")."""
        outcome = DrainOutcome(CUT if cut else CLEAN, waited_for, cut, asyncio.get_running_loop().time() - started)
        DRAINS.labels(outcome.result).inc()
        DRAIN_DURATION.observe(outcome.seconds)
        log.info(
            "drain %d of actor %s%s: %s, %d requests in flight waited for, %d cut at --drain-timeout %gs, %.3fs",
            drain_id, key, where, outcome.result, waited_for, cut, self.drain_timeout_seconds, outcome.seconds,
        )  # fmt: skip
        return outcome

    async def _emptied_within(self, key: str, seconds: float) -> bool:
        """Whether the flights of ``key`` all left within ``seconds``."""
        if not self._flights.get(key):
            return True
        emptied = self._emptied.setdefault(key, asyncio.Event())
        try:
            await asyncio.wait_for(emptied.wait(), seconds)
        except TimeoutError:
            return not self._flights.get(key)
        return True
