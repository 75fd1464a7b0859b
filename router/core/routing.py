"""The decision core's one object: ``RouterCore`` owns every routing decision a data path asks
for, and ``RouterCore.find`` is the entry point of a request.

A data path (router.python, router.nginx) scans a request's head for its target, asks
``target`` which actor it names (or whether it asks for the status page), ``admit`` whether it
may reach it, and ``find`` where that actor serves: an upstream inside a drain flight, from the
RUNNING cache or after parking for a resume. Every refusal comes as a ``RouteError`` (status,
outcome, one-line text) or a ``TargetError`` (400): the data path only relays the answer. How
bytes reach the worker (HTTP, WebSocket, Lua) is the data path's; the two hooks a drain needs
from it (shut a flight's connection, end the open WebSockets and event streams) are handed in.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from domain.operations.router_drain import ROUTER_HEARTBEAT_SECONDS, ROUTER_LEASE_SECONDS
from domain.refs import ActorRef
from router.core import errors, statusz
from router.core.access import AccessGate, Admission
from router.core.activity import Activity
from router.core.api_client import ApiClient
from router.core.cache import ActorCache, CacheInvalidator
from router.core.drain import DrainElsewhere, DrainGate, Flight
from router.core.errors import RETRY_RESUMING_SECONDS, RouteError
from router.core.reach import wait_unless_gone
from router.core.registration import Registration, register_replica
from router.core.resume import Resumer
from router.core.target import TargetError, target_from_headers
from router.core.upstream import Upstream
from router.settings import RouterSettings

log = logging.getLogger(__name__)

T = TypeVar("T")

Leaving = Callable[[], Coroutine[Any, Any, object] | None]
"""Called when a request is about to park: a coroutine that returns when its client left (the
parked wait is then given up at once, its place in the parking lot freed), or None when the
client cannot be watched (its body is streaming already)."""


@dataclass(frozen=True)
class Found:
    """Where a request's actor serves, as ``RouterCore.find`` found it.

    Attributes:
        upstream: The actor's worker address.
        flight: The request's drain flight (router.core.drain): ``drains.leave`` it when the
            exchange with the worker ends.
        token: The drain token taken before the upstream was looked up.
        parked: Whether the request waited for a resume.
        cached: Whether the upstream came from the RUNNING cache.
    """

    upstream: Upstream
    flight: Flight
    token: int
    parked: bool
    cached: bool


class RouterCore:
    """Every decision of the router, shared by both data paths.

    Args:
        settings: Router settings.
        cut: Shuts one flight's worker connection at a drain (the Python data path's
            ``UpstreamClient.cut``).
        end_sessions: Ends actor ``key``'s open WebSockets and event streams with a reason;
            returns how many (``Sessions.end_actor``).
        api_client: Optional API client (built from ``settings.api_server`` when omitted).
        cache: Optional RUNNING-actor cache (a new ``ActorCache`` when omitted; the nginx data
            path passes one whose forgetting reaches nginx).
        elsewhere: The data path's own part of each drain (nginx's), or None.

    Attributes:
        api: The API client.
        cache: RUNNING-actor cache; enabled only while ``invalidator`` holds a LISTEN.
        gate: Who may reach which actor (router.core.access).
        resumer: Single-flight resumer with the parking lot.
        invalidator: LISTEN/NOTIFY loop, or None without a database URL (no caching).
        activity: The actors with traffic on this replica, reported in its heartbeats.
        drains: Who may send to which worker, and the drains before a checkpoint.
        registration: This replica's heartbeat, lease and drains, or None when
            ``settings.register_replica`` is off.
        recent: The requests finished last, for /statusz (the data path adds them).
    """

    def __init__(
        self,
        settings: RouterSettings,
        *,
        cut: Callable[[Flight], object],
        end_sessions: Callable[[str, str], int],
        api_client: ApiClient | None = None,
        cache: ActorCache | None = None,
        elsewhere: DrainElsewhere | None = None,
    ) -> None:
        self.settings = settings
        self.api = api_client or ApiClient(settings.api_server, token=settings.read_api_token())
        self.cache = cache if cache is not None else ActorCache()
        self.gate = AccessGate(self.api, settings.api_server)
        self.recent = statusz.RecentRequests()
        self.cache.on_change.append(self.gate.on_actor_change)
        self.resumer = Resumer(
            self.api, self.cache, settings.parked_request_budget_seconds, settings.max_parked, settings.api_server
        )
        self.invalidator = CacheInvalidator(settings.database_url, self.cache) if settings.database_url else None
        self.activity = Activity(settings.open_streams_keep_awake, reported=settings.register_replica)
        self.drains = DrainGate(
            self.cache,
            self.resumer,
            cut,
            settings.drain_timeout_seconds,
            settle_seconds=settings.upstream_connect_timeout_seconds + 1.0,
            end_sessions=end_sessions,
            elsewhere=elsewhere,
            activity=self.activity,
        )
        self.registration: Registration | None = None
        if settings.register_replica:
            self.registration = register_replica(
                self.api, self.drains, self.cache, self.invalidator, settings.replica_name,
                ROUTER_LEASE_SECONDS, ROUTER_HEARTBEAT_SECONDS,
            )  # fmt: skip

    async def start(self) -> None:
        """Start cache invalidation (when a database URL is set) and the registration (its
        first heartbeat waited for)."""
        if self.invalidator is not None:
            self.invalidator.start()
        if self.registration is not None:
            await self.registration.start()

    async def stop(self) -> None:
        """Stop the registration (its lease given back) and the invalidation; close the API client."""
        if self.registration is not None:
            await self.registration.stop()
        if self.invalidator is not None:
            await self.invalidator.stop()
        await self.api.aclose()

    def target(self, values: list[bytes], host: bytes | None) -> ActorRef:
        """The actor a request names (router.core.target).

        Args:
            values: Its ``ate-target-actor`` header values, in order.
            host: Its Host, or None.

        Raises:
            TargetError: It names none, or one malformed (the 400's text).
        """
        return target_from_headers(values, host, self.settings.domain)

    def asks_statusz(self, path: str, values: list[bytes], host: bytes | None) -> bool:
        """Whether a request is for the router's status page: path ``/statusz``, no
        ``ate-target-actor`` header and a Host that names no actor (else it is the actor's)."""
        if path != statusz.PATH or values:
            return False
        try:
            self.target([], host)
        except TargetError:
            return True
        return False

    async def status_page(self, query_string: bytes, recent: list[statusz.RecentRequest]) -> tuple[bytes, str]:
        """The /statusz page: (body, content type), JSON with ``?format=json`` else HTML.

        Args:
            query_string: The request's raw query.
            recent: The requests to list (the data path's, newest first).
        """
        document = statusz.status_document(
            settings=self.settings.redacted(),
            api=await self.api.health(),
            postgres=statusz.postgres_health(self.invalidator),
            parked=self.resumer.parked,
            max_parked=self.settings.max_parked,
            recent=recent,
        )
        if b"format=json" in query_string.split(b"&"):
            return statusz.render_json(document), "application/json"
        return statusz.render_html(document), "text/html; charset=utf-8"

    async def admit(self, target: ActorRef, headers: list[tuple[bytes, bytes]], deadline: float) -> Admission:
        """Whether the request may reach ``target`` (router.core.access.AccessGate.admit).

        Raises:
            RouteError: 401 or 403, or 503/504 when the API cannot tell in time.
        """
        return await self.gate.admit(target, headers, deadline)

    async def find(
        self, target: ActorRef, deadline: float, *, leaving: Leaving | None = None,
        gone: Callable[[], BaseException] = lambda: asyncio.CancelledError(), use_cache: bool = True,
    ) -> Found:  # fmt: skip
        """Where actor ``target`` serves, inside a drain flight: the entry point of a request.

        The upstream comes from the cache (unless ``use_cache`` is off), else from parking for
        a resume (``wait_running``); it is used only if no drain of the actor began since it was
        looked up (else it is looked up again), and only while this replica has a lease.

        Args:
            target: The actor.
            deadline: ``loop.time()`` by which parking gives up (arrival + the park budget).
            leaving: Watches the client while parked (see ``Leaving``).
            gone: The exception raised when ``leaving`` returned first.
            use_cache: False to skip the cache (its address was just refused).

        Returns:
            The upstream with its flight (the caller's to ``drains.leave``).

        Raises:
            RouteError: From resuming, or 503 when this replica has no lease.
            BaseException: ``gone()`` when the client left while parked.
        """
        key = target.key
        upstream = None
        cached = False
        token = self.drains.token()
        if use_cache:
            upstream = self.cache.get(key)
            cached = upstream is not None
        parked = False
        while True:
            if not self.drains.leased():
                raise self.no_lease(target)
            if upstream is None:
                token = self.drains.token()
                upstream = await self._park(target, deadline, leaving, gone)
                parked = True
            flight = self.drains.enter(key, token, upstream)
            if flight is not None:
                return Found(upstream, flight, token, parked, cached)
            upstream, cached = None, False  # drained since it was looked up: look it up again

    async def reach(
        self,
        target: ActorRef,
        deadline: float,
        connect: Callable[[Found], Awaitable[T]],
        refused: type[Exception],
        *,
        leaving: Leaving | None = None,
        gone: Callable[[], BaseException] = lambda: asyncio.CancelledError(),
    ) -> T:
        """``find`` the actor and ``connect`` to it; a cached address whose worker refuses the
        connection (``refused`` raised by ``connect``) is dropped and found once more, through a
        resume (``refused`` below decides).

        Args:
            connect: Opens the exchange with the found upstream; on success the flight is the
                caller's to ``drains.leave`` when the exchange ends, on failure it is left here.
            refused: The exception ``connect`` raises when nothing was sent (another try is safe).
            leaving: As for ``find``.
            gone: As for ``find``.

        Raises:
            RouteError: From ``find``, or 502 when a freshly resumed worker refuses.
            BaseException: Whatever ``connect`` raises other than ``refused``; ``gone()``.
        """
        found = await self.find(target, deadline, leaving=leaving, gone=gone)
        while True:
            try:
                return await connect(found)
            except refused as exc:
                self.drains.leave(found.flight)
                error = self.refused(target, found.upstream, found.cached)
                if error is not None:
                    raise error from exc
            except BaseException:
                self.drains.leave(found.flight)
                raise
            found = await self.find(target, deadline, leaving=leaving, gone=gone, use_cache=False)

    def refused(self, target: ActorRef, upstream: Upstream | str, cached: bool) -> RouteError | None:
        """A worker refused the connection: the 502 to answer when its address was fresh from a
        resume, or None when it came from the cache (the entry is dropped, if the cache still
        holds it: ``find`` again without the cache, which resumes)."""
        if not cached:
            return errors.worker_unreachable(target, upstream)
        log.info("cached actor %s unreachable at %s: resuming again", target, upstream)
        if str(self.cache.get(target.key)) == str(upstream):
            self.cache.drop(target.key)
        return None

    async def _park(
        self, target: ActorRef, deadline: float, leaving: Leaving | None, gone: Callable[[], BaseException]
    ) -> Upstream:
        """``wait_running``, watching the client; counted as a request of the actor parked here
        (its actor is active, and busy for an idle action's drain)."""
        self.activity.parked(target.key, 1)
        try:
            watch = leaving() if leaving is not None else None
            if watch is None:
                return await self.wait_running(target, deadline)
            return await wait_unless_gone(self.wait_running(target, deadline), watch, gone)
        finally:
            self.activity.parked(target.key, -1)

    async def wait_running(self, target: ActorRef, deadline: float) -> Upstream:
        """``Resumer.wait_running``, after holding the request while its actor is being drained
        (its budget then starts again when the drain ends: it waits for the resume after the
        checkpoint, as when parked).

        Raises:
            RouteError: Not RUNNING within the budget, or refused (404, 503...).
        """
        if self.drains.draining(target.key):
            await self.drains.hold(target.key)
            deadline = max(deadline, asyncio.get_running_loop().time() + self.settings.parked_request_budget_seconds)
        return await self.resumer.wait_running(target, deadline)

    def no_lease(self, target: ActorRef) -> RouteError:
        """503 for a replica whose heartbeats the API has not answered for a lease."""
        name = self.registration.replica if self.registration is not None else "-"
        return RouteError(
            503,
            errors.UNAVAILABLE,
            f"router replica {name} has no lease with the control plane at {self.settings.api_server} (its "
            f"heartbeats are not answered), so it sends no request to actor {target}; retry shortly",
            RETRY_RESUMING_SECONDS,
        )
