"""WebSocket proxying: an ASGI ``websocket`` request routed like HTTP and relayed to the worker.

The request is routed exactly as an HTTP one is (target from ``ate-target-actor`` or Host, the
access gate, the RUNNING cache or a parked resume, the same error texts); only then is a
WebSocket opened to the worker (the ``websockets`` library's asyncio client) and the client's
handshake accepted, with the subprotocol the worker chose. Text and binary messages are relayed
both ways as whole messages; a close code and reason are relayed from either side to the other.

A request the router refuses (unknown actor, no access, no capacity...) is refused before the
handshake with the HTTP answer an HTTP request would get, when the server supports the ASGI
``websocket.http.response`` extension (uvicorn does); otherwise the handshake is accepted and
closed at once with code ``4000 + status`` and the text as reason. A worker that refuses the
upgrade has its own HTTP answer relayed the same way.

Each open WebSocket is a ``router.python.sessions.Session``: when the router stops (or an actor is
drained), both sides are closed with 1001 "going away". Pings are answered on each hop by its
own endpoint, not relayed.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Sequence
from ipaddress import IPv4Network, IPv6Network
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidHandshake, InvalidStatus

from domain.refs import ActorRef
from router.core import errors, statusz
from router.core.drain import DRAIN_REASON, Flight
from router.core.errors import RouteError
from router.core.metrics import ObserveRequest, observe_request
from router.core.routing import Found, RouterCore
from router.core.target import TargetError, scan_head
from router.core.upstream import Upstream
from router.python.asgi import Receive, Scope, Send
from router.python.headers import request_headers
from router.python.sessions import GOING_AWAY, Sessions, StreamMarks
from router.python.websocket_deny import HANDSHAKE_HEADERS, Denier, WorkerRefused, accept_headers
from router.python.websocket_relay import relay_messages
from router.settings import MAX_MESSAGE_BYTES

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_SECONDS = 2.0
"""How long a close waits for the worker's closing handshake before dropping the connection."""

"""Builds the error for a RUNNING actor whose worker refuses connections (the HTTP path's)."""


class _ConnectFailed(Exception):
    """No TCP connection could be made to the worker (refused, unreachable, timed out)."""


class _ClientLeft(Exception):
    """The client went away before its WebSocket was accepted (while parked, say)."""


class WebSocketProxy:
    """Serves ASGI ``websocket`` requests: routes each to its actor (router.core.routing) and relays it.

    The settings in force are the core's: domain, parking budget, worker connect and
    response-head timeouts; the idle and whole-request timeouts do not apply (a WebSocket may
    stay quiet and open for as long as both ends want, each hop keeping it alive with pings).

    Args:
        core: The decision core: target, access, the worker found inside a drain flight (a
            WebSocket is one flight for its whole life), the /statusz list of recent requests.
        sessions: Where open WebSockets are registered (ended at a drain and at shutdown).
        observe: Counts each finished WebSocket as a request, ``(outcome, seconds)``.
    """

    def __init__(self, core: RouterCore, sessions: Sessions, observe: ObserveRequest = observe_request) -> None:
        self.core = core
        self.settings = core.settings
        self.observe = observe
        self.sessions = sessions
        self.recent = core.recent
        self.drains = core.drains
        self.trusted = core.settings.trusted_networks

    async def serve(self, scope: Scope, receive: Receive, send: Send, request_id: bytes, target_label: str) -> None:
        """Handle one WebSocket request to its end; count, list and log it as a request.

        Args:
            scope: ASGI websocket scope, with its one ``X-Request-Id`` header.
            receive: ASGI receive.
            send: ASGI send.
            request_id: The request's id (returned in the handshake answer).
            target_label: The ``ate-target-actor`` header as given, for the log.
        """
        loop = asyncio.get_running_loop()
        started = loop.time()
        outcome, status = errors.ERROR, 0
        try:
            outcome, status = await self._session(scope, receive, send, request_id, started)
        finally:
            elapsed = loop.time() - started
            self.observe(outcome, elapsed)
            self.recent.add(
                statusz.RecentRequest(
                    time.time(), request_id.decode(), target_label, "WEBSOCKET", scope["path"][:200],
                    status, outcome, round(elapsed * 1000, 1),
                )
            )  # fmt: skip
            log.info(
                "websocket %s %s %s %d %s %.1f ms",
                request_id.decode(), target_label, scope["path"], status, outcome, elapsed * 1000,
            )  # fmt: skip

    async def _session(
        self, scope: Scope, receive: Receive, send: Send, request_id: bytes, started: float
    ) -> tuple[str, int]:
        """Route, open, relay; returns (outcome, status: 101 when accepted)."""
        if (await receive())["type"] != "websocket.connect":
            return errors.CLIENT_GONE, 0
        deny = Denier(scope, send, request_id)
        try:
            target = self.core.target(*scan_head(scope["headers"]))
            if self.sessions.closing:
                raise RouteError(
                    503, errors.UNAVAILABLE, "the router is restarting; connect again", errors.RETRY_CAPACITY_SECONDS
                )
            worker, parked, flight = await self._open(
                scope, receive, target, started + self.settings.parked_request_budget_seconds
            )
        except TargetError as exc:
            await deny.text(400, str(exc))
            return errors.BAD_TARGET, 400
        except RouteError as exc:
            await deny.text(exc.status, exc.message, exc.retry_after)
            return exc.outcome, exc.status
        except WorkerRefused as exc:
            await deny.relay(exc)
            return (errors.PARKED_OK if exc.parked else errors.OK), exc.status
        except _ClientLeft:
            return errors.CLIENT_GONE, 0
        try:
            await send(
                {
                    "type": "websocket.accept",
                    "subprotocol": worker.subprotocol,
                    "headers": [*accept_headers(worker), (b"x-request-id", request_id)],
                }
            )
            with self.sessions.open(target.key) as session:
                if self.drains.draining(target.key):  # a drain began during the handshake: it missed this one
                    session.end(DRAIN_REASON)
                moved = StreamMarks(self.core.activity, flight).opened()
                clean = await relay_messages(worker, receive, send, session, moved)
        finally:
            await worker.close(GOING_AWAY, "the client went away")
            self.drains.leave(flight)
        if not clean:
            return errors.ERROR, 101
        return (errors.PARKED_OK if parked else errors.OK), 101

    async def _open(
        self, scope: Scope, receive: Receive, target: ActorRef, deadline: float
    ) -> tuple[ClientConnection, bool, Flight]:
        """Find the actor's worker (as for HTTP, inside a drain flight) and open the WebSocket to it.

        Returns:
            The connection, whether the request was parked for a resume, and its flight
            (``self.drains.leave`` it when the WebSocket ends).

        Raises:
            RouteError: From the gate or resuming; 502 when the worker cannot be reached or
                fails the handshake, 504 when it does not answer the handshake in time, 503
                when this replica has no lease.
            WorkerRefused: The worker answered with HTTP instead of accepting.
            _ClientLeft: The client went away while parked.
        """
        admission = await self.core.admit(target, scope["headers"], deadline)
        headers = upstream_headers({**scope, "headers": admission.headers}, self.trusted)

        async def connect(found: Found) -> tuple[ClientConnection, bool, Flight]:
            return await self._connect(scope, headers, found.upstream, target, found.parked), found.parked, found.flight

        return await self.core.reach(
            target,
            deadline,
            connect,
            _ConnectFailed,
            leaving=lambda: _next(receive),  # before the accept, only a disconnect can come
            gone=lambda: _ClientLeft(f"client left while its WebSocket waited for actor {target}"),
        )

    async def _connect(
        self, scope: Scope, headers: list[tuple[str, str]], upstream: Upstream, target: ActorRef, parked: bool
    ) -> ClientConnection:
        """Open the WebSocket: TCP within the connect timeout, the handshake within the
        response-head timeout.

        Raises:
            _ConnectFailed: No TCP connection (nothing was sent: another try is safe).
            WorkerRefused: The worker answered the handshake with HTTP.
            RouteError: 502 for a failed handshake, 504 for one not answered in time.
        """
        sock = await _tcp_connect(upstream, self.settings.upstream_connect_timeout_seconds)
        head_timeout = self.settings.response_head_timeout_seconds
        raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        query = (scope.get("query_string") or b"").decode("latin-1")
        uri = f"ws://{upstream}{raw_path}" + (f"?{query}" if query else "")
        try:
            return await connect(
                uri,
                additional_headers=headers,
                subprotocols=scope.get("subprotocols") or None,
                compression=None,  # per hop: the worker is near, its bytes cost no bandwidth
                user_agent_header=None,  # the client's own User-Agent is forwarded
                proxy=None,
                sock=sock,
                open_timeout=head_timeout,
                close_timeout=CLOSE_TIMEOUT_SECONDS,
                max_size=MAX_MESSAGE_BYTES,
            )
        except InvalidStatus as exc:
            response = exc.response
            kept = [(k.lower().encode(), v.encode("latin-1")) for k, v in response.headers.raw_items()]
            raise WorkerRefused(response.status_code, kept, bytes(response.body or b""), parked) from exc
        except TimeoutError as exc:
            sock.close()
            raise RouteError(
                504,
                errors.TIMEOUT,
                f"actor {target} at {upstream} sent no WebSocket handshake answer within {head_timeout:g}s; "
                "retry, or raise the router's --response-head-timeout if it needs longer",
            ) from exc
        except (InvalidHandshake, OSError) as exc:
            sock.close()
            raise RouteError(
                502,
                errors.ERROR,
                f"actor {target} at {upstream} failed the WebSocket handshake: {exc or type(exc).__name__}",
            ) from exc


async def _tcp_connect(upstream: Upstream, timeout_seconds: float) -> socket.socket:
    """A connected TCP socket to the worker (TCP_NODELAY).

    Raises:
        _ConnectFailed: Refused, unreachable, or not connected within ``timeout_seconds``.
    """
    loop = asyncio.get_running_loop()
    sock: socket.socket | None = None
    try:
        infos = await loop.getaddrinfo(upstream.ip, upstream.port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        family, _, proto, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM, proto)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.wait_for(loop.sock_connect(sock, address), timeout_seconds)
    except OSError as exc:  # TimeoutError included
        if sock is not None:
            sock.close()
        raise _ConnectFailed(str(exc) or type(exc).__name__) from exc
    return sock


async def _next(receive: Receive) -> dict[str, Any]:
    return await receive()


def upstream_headers(scope: Scope, trusted: Sequence[IPv4Network | IPv6Network] = ()) -> list[tuple[str, str]]:
    """Headers to send the worker with the WebSocket handshake.

    Args:
        scope: ASGI websocket scope (lower-case header names).
        trusted: Networks of trusted proxies.

    Returns:
        What ``router.python.proxy.request_headers`` sends for HTTP (X-Request-Id, X-Forwarded-*
        with the proto ``http`` or ``https``, no hop-by-hop or target header), without the client's own handshake headers
        (``Sec-WebSocket-*``: the upstream client makes its own, and the subprotocols offered
        are passed on by it) and without ``Connection: close``; as (name, value) strings.
    """
    scheme = "https" if scope.get("scheme") in ("wss", "https") else "http"  # X-Forwarded-Proto names HTTP's
    return [
        (k.decode("latin-1"), v.decode("latin-1"))
        for k, v in request_headers({**scope, "scheme": scheme}, trusted)
        if k not in HANDSHAKE_HEADERS
    ]
