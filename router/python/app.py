"""The Python data path's ASGI app: a request's target and answer from the decision core
(router.core.routing.RouterCore), the exchange with the worker streamed here (router.python.proxy,
router.python.websocket).

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
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.routing import Route, WebSocketRoute

from domain.refs import ActorRef
from router.core import errors, statusz
from router.core.api_client import ApiClient
from router.core.drain import Flight
from router.core.errors import RouteError
from router.core.metrics import ObserveRequest, observe_request
from router.core.routing import Found, RouterCore
from router.core.target import TargetError, scan_head, target_label
from router.python.proxy import open_upstream, relay
from router.python.request_body import BodyStream
from router.python.sessions import Sessions, StreamMarks
from router.python.upstream_client import UpstreamClient, UpstreamResponse, new_upstream_client
from router.python.upstream_errors import ClientGone, ClientIdle, UpstreamConnectError
from router.python.websocket import WebSocketProxy
from router.settings import RouterSettings

log = logging.getLogger(__name__)


@dataclass
class Mechanics:
    """The Python data path's means of reaching workers, made before the core (whose drains shut
    their connections and end their sessions).

    Attributes:
        upstream_client: The worker HTTP client.
        sessions: The open WebSockets and event streams (ended at a drain or at shutdown).
    """

    upstream_client: UpstreamClient
    sessions: Sessions

    @classmethod
    def new(cls, settings: RouterSettings, upstream_client: UpstreamClient | None = None) -> Mechanics:
        """A worker client with the settings' timeouts (or ``upstream_client``) and no session open."""
        client = upstream_client or new_upstream_client(
            settings.upstream_connect_timeout_seconds,
            settings.response_head_timeout_seconds,
            settings.idle_timeout_seconds,
        )
        return cls(client, Sessions())

    def core(
        self, settings: RouterSettings, api_client: ApiClient | None = None, **kwargs: Any
    ) -> RouterCore:
        """A decision core whose drains cut these connections and end these sessions;
        ``kwargs`` go to ``RouterCore`` (``cache``, ``elsewhere``)."""
        return RouterCore(
            settings,
            cut=self.upstream_client.cut,
            end_sessions=self.sessions.end_actor,
            api_client=api_client,
            **kwargs,
        )


class ActorRouter:
    """Routes one HTTP or WebSocket request to its actor; an ASGI app for ``scope["type"]``
    ``"http"`` and ``"websocket"`` (the latter served by ``router.python.websocket``).

    Args:
        core: The decision core (made by ``mechanics.core``).
        mechanics: The worker client and open sessions.
        observe: Counts each finished request, ``(outcome, seconds)`` (the Prometheus request
            families when omitted; the nginx data path tallies the requests it relays here).

    Attributes:
        core: The decision core (its ``cache``, ``resumer``, ``drains``, ``registration``, ``recent``...).
        sessions: Open WebSockets and event streams, ended by ``sessions.end_all`` at shutdown.
    """

    def __init__(self, core: RouterCore, mechanics: Mechanics, observe: ObserveRequest = observe_request) -> None:
        self.core = core
        self.settings = core.settings
        self.observe = observe
        self.upstream_client = mechanics.upstream_client
        self.sessions = mechanics.sessions
        self.trusted = self.settings.trusted_networks
        self.websockets = WebSocketProxy(core, self.sessions, observe)

    async def start(self) -> None:
        """Start the core (cache invalidation, registration)."""
        await self.core.start()

    async def stop(self) -> None:
        """Stop the core, and close the worker client."""
        await self.core.stop()
        await self.aclose()

    async def aclose(self) -> None:
        """Close the worker client (the core is its owner's to stop)."""
        await self.upstream_client.aclose()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Handle one HTTP request (ASGI): with its `X-Request-Id` (the client's, or a new one),
        sent to the actor, returned to the client and logged. A WebSocket goes to ``router.python.websocket``."""
        if scope["type"] == "websocket":
            scope, request_id = with_request_id(scope)
            await self.websockets.serve(scope, receive, send, request_id, target_label(scope["headers"]))
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

        if self.core.asks_statusz(scope["path"], *scan_head(scope["headers"])):
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
                    await _answer_stopping(send_with_id, target_label(scope["headers"]), self.settings.stop_grace_seconds)
            raise
        finally:
            elapsed = loop.time() - started
            self.observe(outcome, elapsed)
            finished = statusz.RecentRequest(
                time.time(), request_id.decode(), target_label(scope["headers"]), scope["method"], scope["path"][:200],
                status, outcome, round(elapsed * 1000, 1),
            )  # fmt: skip
            self.core.recent.add(finished)
            log.info(
                "request %s %s %s %s %d %s %.1f ms",
                request_id.decode(), target_label(scope["headers"]), scope["method"], scope["path"], status, outcome, elapsed * 1000,
            )  # fmt: skip

    async def _statusz(self, scope: dict[str, Any], send: Any) -> None:
        """Answer /statusz: HTML, or JSON with `?format=json`."""
        data, kind = await self.core.status_page(scope.get("query_string", b""), self.core.recent.items())
        headers = [
            (b"content-type", kind.encode()),
            (b"content-length", str(len(data)).encode()),
            (b"cache-control", b"no-store"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": data, "more_body": False})

    async def _route(self, scope: dict[str, Any], receive: Any, send: Any, started: float) -> str:
        values, host = scan_head(scope["headers"])
        body = BodyStream(receive, self.settings.idle_timeout_seconds)
        try:
            target = self.core.target(values, host)
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
            marks = StreamMarks(self.core.activity, flight)
            outcome = await relay(response, receive, send, body, self.sessions, target.key, marks)
        finally:
            self.core.drains.leave(flight)
        return errors.PARKED_OK if outcome == errors.OK and parked else outcome

    async def _open(
        self, scope: dict[str, Any], body: BodyStream, target: ActorRef, deadline: float, started: float
    ) -> tuple[UpstreamResponse, bool, Flight]:
        """Admit the request, find the actor's upstream (``RouterCore.reach``, inside a drain
        flight) and open the proxied request to it, watching the client while parked (one that
        leaves frees its place in the parking lot at once; the resume it started goes on).

        Returns:
            The response (head received), whether the request was parked for a resume, and
            its flight (``self.core.drains.leave`` it when the response ends).

        Raises:
            RouteError: From the core, 502 when the worker cannot be reached, 504 when it does
                not start answering in time, 503 when this replica has no lease.
            ClientGone: The client left while parked or while sending its body.
        """
        admission = await self.core.admit(target, scope["headers"], deadline)
        scope = {**scope, "headers": admission.headers}
        request_deadline = started + self.settings.request_timeout_seconds

        async def connect(found: Found) -> tuple[UpstreamResponse, bool, Flight]:
            response = await open_upstream(
                self.upstream_client, scope, body, found.upstream, target.key, self.trusted, request_deadline,
                found.flight,
            )  # fmt: skip
            return response, found.parked, found.flight

        return await self.core.reach(
            target,
            deadline,
            connect,
            UpstreamConnectError,
            # a body streaming upstream already: receive is not ours to watch
            leaving=lambda: None if body.started else body.wait_disconnect(),
            gone=lambda: ClientGone(f"client left while its request waited for actor {target}"),
        )


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
    mechanics = Mechanics.new(settings, upstream_client)
    router = ActorRouter(mechanics.core(settings, api_client), mechanics)

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
