"""The router's ASGI app: target → (cache | resume) → streaming proxy, plus metrics.

Every path on the proxy port belongs to actors, so the app has one catch-all route and no
endpoints of its own; metrics are served elsewhere (see ``router.core.metrics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.routing import Route, WebSocketRoute

from domain.operations.router_drain import ROUTER_HEARTBEAT_SECONDS, ROUTER_LEASE_SECONDS
from domain.refs import ActorRef
from router.core import errors, statusz
from router.core.access import AccessGate
from router.core.api_client import ApiClient
from router.core.cache import ActorCache, CacheInvalidator
from router.core.drain import DrainGate, Flight
from router.core.errors import RETRY_RESUMING_SECONDS, RouteError
from router.core.metrics import ObserveRequest, observe_request
from router.core.reach import reach_actor, wait_unless_gone
from router.core.registration import Registration, register_replica
from router.core.resume import Resumer
from router.core.target import TARGET_HEADER, TargetError, target_from_headers
from router.core.upstream import Upstream
from router.python.proxy import BodyStream, open_upstream, relay
from router.python.sessions import Sessions
from router.python.upstream_client import (
    ClientGone,
    ClientIdle,
    UpstreamClient,
    UpstreamConnectError,
    UpstreamResponse,
    new_upstream_client,
)
from router.python.websocket import WebSocketProxy
from router.settings import RouterSettings

log = logging.getLogger(__name__)

_TARGET_HEADER = TARGET_HEADER.encode()

class ActorRouter:
    """Routes one HTTP or WebSocket request to its actor; an ASGI app for ``scope["type"]``
    ``"http"`` and ``"websocket"`` (the latter served by ``router.python.websocket``).

    Args:
        settings: Router settings.
        api_client: Optional API client (built from ``settings.api_server`` when omitted).
        upstream_client: Optional worker client (``upstream_client.new_upstream_client`` when omitted).
        cache: Optional RUNNING-actor cache (a new ``ActorCache`` when omitted; the nginx data
            path passes one whose forgetting reaches nginx).
        drain_gate: Builds the drain gate from ``DrainGate``'s arguments (``DrainGate`` itself
            when omitted; the nginx data path's also drains nginx, router.nginx.drain).
        observe: Counts each finished request, ``(outcome, seconds)`` (the Prometheus request
            families when omitted; the nginx data path tallies its relayed requests).

    Attributes:
        cache: RUNNING-actor cache; enabled only while ``invalidator`` holds a LISTEN.
        gate: Who may reach which actor (router.core.access).
        resumer: Single-flight resumer with the parking lot.
        invalidator: LISTEN/NOTIFY loop, or None without a database URL (no caching).
        sessions: Open WebSockets and event streams, ended by ``sessions.end_all`` at shutdown.
        drains: Who may send to which worker, and the drains before a checkpoint (router.core.drain).
        registration: This replica's heartbeat, lease and drains (router.core.registration), or
            None when ``settings.register_replica`` is off.
    """

    def __init__(
        self,
        settings: RouterSettings,
        api_client: ApiClient | None = None,
        upstream_client: UpstreamClient | None = None,
        cache: ActorCache | None = None,
        drain_gate: Callable[..., DrainGate] = DrainGate,
        observe: ObserveRequest = observe_request,
    ) -> None:
        self.settings = settings
        self.observe = observe
        self.api = api_client or ApiClient(settings.api_server, token=settings.read_api_token())
        self.upstream_client = upstream_client or new_upstream_client(
            settings.upstream_connect_timeout_seconds,
            settings.response_head_timeout_seconds,
            settings.idle_timeout_seconds,
        )
        self.cache = cache if cache is not None else ActorCache()
        self.gate = AccessGate(self.api, settings.api_server)
        self.trusted = settings.trusted_networks
        self.recent = statusz.RecentRequests()
        self.cache.on_change.append(self.gate.forget)
        self.resumer = Resumer(
            self.api,
            self.cache,
            settings.parked_request_budget_seconds,
            settings.max_parked,
            settings.api_server,
        )
        self.invalidator = (
            CacheInvalidator(settings.database_url, self.cache) if settings.database_url else None
        )
        self.sessions = Sessions()
        self.drains = drain_gate(
            self.cache,
            self.resumer,
            self.upstream_client,
            settings.drain_timeout_seconds,
            settle_seconds=settings.upstream_connect_timeout_seconds + 1.0,
            end_sessions=self.sessions.end_actor,
        )
        self.websockets = WebSocketProxy(
            settings=settings, gate=self.gate, cache=self.cache, resumer=self.resumer, sessions=self.sessions,
            recent=self.recent, unreachable=worker_unreachable, drains=self.drains, wait_running=self.wait_running,
            no_lease=self.no_lease, trusted=self.trusted, observe=observe,
        )  # fmt: skip
        self.registration: Registration | None = None
        if settings.register_replica:
            self.registration = register_replica(
                self.api, self.drains, self.cache, self.invalidator, settings.replica_name,
                ROUTER_LEASE_SECONDS, ROUTER_HEARTBEAT_SECONDS,
            )  # fmt: skip

    async def start(self) -> None:
        """Start cache invalidation (when a database URL is set) and the registration."""
        if self.invalidator is not None:
            self.invalidator.start()
        if self.registration is not None:
            await self.registration.start()

    async def stop(self) -> None:
        """Stop the registration and invalidation, and close the HTTP clients."""
        if self.registration is not None:
            await self.registration.stop()
        if self.invalidator is not None:
            await self.invalidator.stop()
        await self.upstream_client.aclose()
        await self.api.aclose()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Handle one HTTP request (ASGI): with its `X-Request-Id` (the client's, or a new one),
        sent to the actor, returned to the client and logged. A WebSocket goes to ``router.python.websocket``."""
        if scope["type"] == "websocket":
            scope, request_id = with_request_id(scope)
            await self.websockets.serve(scope, receive, send, request_id, target_of(scope))
            return
        loop = asyncio.get_running_loop()
        started = loop.time()
        outcome = errors.OK
        scope, request_id = with_request_id(scope)
        status = 0

        async def send_with_id(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", []), (REQUEST_ID_HEADER, request_id)]}
            await send(message)

        if scope["path"] == statusz.PATH and target_of(scope) == "-" and not self._names_actor(scope):
            await self._statusz(scope, send_with_id)
            return
        try:
            outcome = await self._route(scope, receive, send_with_id, started)
        except asyncio.CancelledError:
            # The router is stopping and the request outlasted its grace (uvicorn cancels it):
            # say so, where no answer began (uvicorn would send a bare 500), and log it as cut.
            outcome = errors.ERROR
            if status == 0:
                with contextlib.suppress(Exception):
                    await _answer_stopping(send_with_id, target_of(scope), self.settings.stop_grace_seconds)
            raise
        finally:
            elapsed = loop.time() - started
            self.observe(outcome, elapsed)
            finished = statusz.RecentRequest(
                time.time(), request_id.decode(), target_of(scope), scope["method"], scope["path"][:200],
                status, outcome, round(elapsed * 1000, 1),
            )  # fmt: skip
            self.recent.add(finished)
            log.info(
                "request %s %s %s %s %d %s %.1f ms",
                request_id.decode(), target_of(scope), scope["method"], scope["path"], status, outcome, elapsed * 1000,
            )  # fmt: skip

    def _names_actor(self, scope: dict[str, Any]) -> bool:
        """Whether the request's Host names an actor (`<name>.<atespace>.actors.<domain>`)."""
        host = next((v for k, v in scope["headers"] if k == b"host"), None)
        try:
            target_from_headers([], host, self.settings.domain)
        except TargetError:
            return False
        return True

    async def _statusz(self, scope: dict[str, Any], send: Any) -> None:
        """Answer /statusz: HTML, or JSON with `?format=json`."""
        postgres = statusz.postgres_health(self.invalidator)
        document = statusz.status_document(
            settings=self.settings.redacted(),
            api=await self.api.health(),
            postgres=postgres,
            parked=self.resumer.parked,
            max_parked=self.settings.max_parked,
            recent=self.recent.items(),
        )
        as_json = b"format=json" in scope.get("query_string", b"").split(b"&")
        data = statusz.render_json(document) if as_json else statusz.render_html(document)
        kind = b"application/json" if as_json else b"text/html; charset=utf-8"
        headers = [(b"content-type", kind), (b"content-length", str(len(data)).encode()), (b"cache-control", b"no-store")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": data, "more_body": False})

    async def _route(self, scope: dict[str, Any], receive: Any, send: Any, started: float) -> str:
        headers: list[bytes] = []
        host: bytes | None = None
        for key, value in scope["headers"]:
            if key == _TARGET_HEADER:
                headers.append(value)
            elif key == b"host":
                host = value
        body = BodyStream(receive, self.settings.idle_timeout_seconds)
        try:
            target = target_from_headers(headers, host, self.settings.domain)
            deadline = started + self.settings.parked_request_budget_seconds
            response, parked, flight = await self._open(scope, body, target, deadline, started)
        except TargetError as exc:
            await _answer(send, 400, str(exc))
            return errors.BAD_TARGET
        except RouteError as exc:
            await _answer(send, exc.status, exc.message, exc.retry_after)
            return exc.outcome
        except ClientIdle as exc:
            await _answer(send, 408, f"{exc}; send the body without pauses, or raise the router's --idle-timeout")
            return errors.TIMEOUT
        except ClientGone:
            return errors.CLIENT_GONE
        try:
            outcome = await relay(response, receive, send, body, self.sessions, target.key)
        finally:
            self.drains.leave(flight)
        return errors.PARKED_OK if outcome == errors.OK and parked else outcome

    async def _open(
        self, scope: dict[str, Any], body: BodyStream, target: ActorRef, deadline: float, started: float
    ) -> tuple[UpstreamResponse, bool, Flight]:
        """Find the actor's upstream and open the proxied request to it, inside a drain
        ``Flight`` (router.core.drain): an upstream looked up before a drain of the actor is never used.

        Returns:
            The response (head received), whether the request was parked for a resume, and
            its flight (``self.drains.leave`` it when the response ends).

        Raises:
            RouteError: From resuming, 502 when the worker cannot be reached, 504 when it does
                not start answering in time, 503 when this replica has no lease.
            ClientGone: The client left while parked or while sending its body.
        """
        admission = await self.gate.admit(target, scope["headers"], deadline)
        scope = {**scope, "headers": admission.headers}
        request_deadline = started + self.settings.request_timeout_seconds

        async def connect(upstream: Upstream, flight: Flight, parked: bool) -> tuple[UpstreamResponse, bool, Flight]:
            response = await open_upstream(
                self.upstream_client, scope, body, upstream, target.key, self.trusted, request_deadline, flight
            )
            return response, parked, flight

        return await reach_actor(
            target,
            cache=self.cache,
            drains=self.drains,
            park=lambda: self._park(target, deadline, body),
            connect=connect,
            refused=UpstreamConnectError,
            unreachable=worker_unreachable,
            no_lease=self.no_lease,
        )

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

    async def _park(self, target: ActorRef, deadline: float, body: BodyStream) -> Upstream:
        """Wait for the actor to be RUNNING (``Resumer.wait_running``) while watching the client:
        one that leaves frees its place in the parking lot at once; the resume it started goes on.

        Raises:
            RouteError: From ``Resumer.wait_running``.
            ClientGone: The client disconnected while parked.
        """
        if body.started:  # its body is streaming upstream already: receive is not ours to watch
            return await self.wait_running(target, deadline)
        return await wait_unless_gone(
            self.wait_running(target, deadline),
            body.wait_disconnect(),
            lambda: ClientGone(f"client left while its request waited for actor {target}"),
        )

    async def wait_running(self, target: ActorRef, deadline: float) -> Upstream:
        """``Resumer.wait_running``, after holding the request while its actor is being drained
        (its budget then starts again when the drain ends: it waits for the resume after the
        checkpoint, as when parked)."""
        if self.drains.draining(target.key):
            await self.drains.hold(target.key)
            deadline = max(deadline, asyncio.get_running_loop().time() + self.settings.parked_request_budget_seconds)
        return await self.resumer.wait_running(target, deadline)


REQUEST_ID_HEADER = b"x-request-id"
_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:+=/-]{1,128}")


def with_request_id(scope: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    """The scope with exactly one `X-Request-Id`: the client's when it is 1-128 characters of
    letters, digits and `._:+=/-`, else a new random one (replacing a malformed one)."""
    given = [v for k, v in scope["headers"] if k == REQUEST_ID_HEADER]
    if len(given) == 1 and _REQUEST_ID.fullmatch(given[0]):
        return scope, given[0]
    request_id = uuid.uuid4().hex.encode()
    headers = [(k, v) for k, v in scope["headers"] if k != REQUEST_ID_HEADER]
    return {**scope, "headers": [*headers, (REQUEST_ID_HEADER, request_id)]}, request_id


def target_of(scope: dict[str, Any]) -> str:
    """The `ate-target-actor` header as given (for the log), or `-`."""
    for key, value in scope["headers"]:
        if key == _TARGET_HEADER:
            return str(value.decode("latin-1"))[:200]
    return "-"


def worker_unreachable(target: ActorRef, upstream: Upstream | str) -> RouteError:
    """502 for a RUNNING actor whose worker refuses connections: maybe for good (a dead
    sandbox), so no promise of recovery; the control plane may later mark it CRASHED."""
    log.warning("actor %s is RUNNING but its worker %s does not answer", target, upstream)
    ref = f"actor {target.name} -a {target.atespace}"
    return RouteError(
        502,
        errors.ERROR,
        f"actor {target} is RUNNING but its worker {upstream} does not answer; if this "
        f"persists, check 'ate describe {ref}' or revert it with 'ate revert {ref}'",
    )


async def _answer(send: Any, status: int, message: str, retry_after: int | None = None) -> None:
    """Send a one-line plain-text answer, with ``Retry-After`` when given (seconds)."""
    data = (" ".join(message.split()) + "\n").encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(data)).encode()),
    ]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data, "more_body": False})


def create_app(
    settings: RouterSettings,
    api_client: ApiClient | None = None,
    upstream_client: UpstreamClient | None = None,
) -> Starlette:
    """Build the router's Starlette app.

    Args:
        settings: Router settings.
        api_client: Optional API client to use instead of one built from settings.
        upstream_client: Optional worker HTTP client.

    Returns:
        The app; ``app.state.router`` is the ``ActorRouter`` (cache, resumer, ...).
    """
    router = ActorRouter(settings, api_client, upstream_client)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await router.start()
        try:
            yield
        finally:
            await router.stop()

    routes = [Route("/{path:path}", endpoint=router), WebSocketRoute("/{path:path}", endpoint=router)]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.router = router
    return app


async def _answer_stopping(send: Any, target: str, grace_seconds: int) -> None:
    """The 503 of a request the router's stop cut off before any answer began (``grace_seconds``:
    the router's --stop-grace)."""
    await _answer(send, 503, f"the router is stopping and this request to actor {target} did not finish within "
                  f"its {grace_seconds} s grace; send it again (another router replica, or this one once "
                  "it is back, takes it)", retry_after=1)
