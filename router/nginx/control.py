"""The control service of the nginx data path: what nginx asks when it does not know an actor.

nginx (router/nginx/ate_router.lua) asks ``GET /route`` on a cache miss, with the client's
headers and, as query arguments, the raw ``ate-target-actor`` values (``t``, count ``n``), the
Host (``h``), the request target (``u``) and, after a cached worker refused a connection, that
worker (``x``). The answer is either where the actor serves (200 with ``X-Ate-Upstream``,
``X-Ate-Host``, ``X-Ate-Actor``, ``X-Ate-Strip``, ``X-Ate-Parked`` and ``X-Ate-Cache``: ``public``,
``token`` or ``no``), or the exact status, text and ``Retry-After`` of the Python data path,
with ``X-Ate-Outcome``. ``GET /failed`` gives the texts of a worker that failed (``kind``
``connect``, ``timeout`` with ``what`` ran out, ``head`` or ``request``, ``cut`` by a drain or
``broken``); ``GET /statusz`` the status page. Under ``/relay``
nginx hands over whole requests (WebSockets, event streams, chunked uploads), which the Python
router proxies itself (``relayed``).

Every decision is the decision core's (router.core.routing.RouterCore: target, access, resume
and parking, the RUNNING-actor cache with its LISTEN, drains, the error texts), the same object
the relayed requests are routed by. Every invalidation of that cache is pushed to nginx's
admin server (router.nginx.admin): a NOTIFY about an actor forgets it there too, a lost or re-made
LISTEN forgets everything. The relay (``Relay``) is handed in by whoever wires the process
(router.main): this data path never imports the Python one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol
from urllib.parse import parse_qsl

import httpx

from domain.refs import ActorRef
from router.core import errors, statusz
from router.core.cache import ActorCache
from router.core.errors import (
    RouteError,
    cut_by_drain,
    response_head_timeout,
    upstream_failed,
    worker_unreachable,
)
from router.core.routing import RouterCore
from router.core.target import TargetError, is_label
from router.core.upstream import MISSING_END, Upstream, missing_head
from router.nginx.admin import NginxAdmin
from router.nginx.config import RELAY_PREFIX
from router.nginx.metrics import NginxRequestMetrics, RelayedTally

log = logging.getLogger(__name__)


class OpenSessions(Protocol):
    """The relayed WebSockets and event streams open now (``router.python.sessions.Sessions``)."""

    def __len__(self) -> int:
        """How many are open."""
        ...

    async def end_all(self, timeout_seconds: float) -> bool:
        """End them all (close 1001, the end of the stream); whether all closed within ``timeout_seconds``."""
        ...


class Relay(Protocol):
    """What proxies the requests nginx relays (an ASGI app on the same decision core: the
    Python data path's ``ActorRouter``, wired by router.main)."""

    @property
    def sessions(self) -> OpenSessions:
        """Its relayed WebSockets and event streams open now."""
        ...

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Proxy one relayed request (ASGI ``http`` or ``websocket``)."""
        ...

    async def aclose(self) -> None:
        """Close its worker connections' client."""
        ...


class NotifyingCache(ActorCache):
    """An ``ActorCache`` whose every forgetting is pushed to nginx as well."""

    def __init__(self, admin: NginxAdmin) -> None:
        super().__init__()
        self.admin = admin

    def drop(self, key: str) -> None:
        """Forget actor ``key`` here and in nginx."""
        super().drop(key)
        self.admin.invalidate(key)

    def clear(self) -> None:
        """Forget every actor here and in nginx."""
        super().clear()
        self.admin.invalidate(None)


def _upstream_host(upstream: Upstream) -> str:
    text = str(upstream)
    return text if upstream.port != 80 else text.rsplit(":", 1)[0]


LEASE_TELL_SECONDS = 0.2
"""How often nginx is told how long the lease runs (a lease nginx was told ends on its own)."""

LEASE_UNREGISTERED_SECONDS = 3600.0
"""The lease nginx is told when the replica does not register (``register_replica`` off)."""


class ControlService:
    """The control path answering nginx; an ASGI app (``/route``, ``/failed``, ``/statusz``,
    ``/relay/...``).

    Its decision core's cache tells nginx what it forgets (``NotifyingCache``) and its drains
    are carried out in nginx as well (router.nginx.drain.NginxDrain). The requests nginx relays
    under ``/relay`` (WebSockets, requests asking for an event stream, chunked uploads) go to
    ``relay`` on the same core, so a drain or a stop ends them the clean way (close 1001 with a
    reason; the end of the stream) as on the Python data path.

    Args:
        core: The decision core (its cache a ``NotifyingCache`` of ``admin``, its drains'
            ``elsewhere`` a ``NginxDrain`` of ``admin``).
        admin: The nginx admin client.
        relay: Proxies the relayed requests, counting each in ``relayed``.
        relayed: The tally of the relayed requests (added to nginx's counters).

    Attributes:
        core: The decision core (its ``cache``, ``drains``, ``registration``; its ``recent``
            lists the relayed requests finished last, nginx lists the others).
        metrics: The request counters as Prometheus families (nginx's and the relayed requests').
        sessions: The relayed WebSockets and event streams open now.
    """

    def __init__(self, core: RouterCore, admin: NginxAdmin, relay: Relay, relayed: RelayedTally) -> None:
        self.core = core
        self.settings = core.settings
        self.admin = admin
        self.relay = relay
        self.sessions = relay.sessions
        self.metrics = NginxRequestMetrics(admin, relayed)
        self._lease_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start pushing invalidations to nginx, the LISTEN loop, the registration (its first
        heartbeat waited for) and telling nginx how long the lease runs."""
        self.admin.start()
        await self.core.start()
        self._lease_task = asyncio.create_task(self._tell_lease(), name="ate-router-nginx-lease")

    async def stop(self) -> None:
        """Stop the lease, the registration, the LISTEN loop and close the clients."""
        if self._lease_task is not None:
            self._lease_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._lease_task
        await self.core.stop()
        await self.relay.aclose()
        await self.admin.stop()

    def lease_left(self) -> float:
        """Seconds this replica's lease runs still (0 when over; unbounded without registration)."""
        if self.core.registration is None:
            return LEASE_UNREGISTERED_SECONDS
        if not self.core.registration.leased():  # also clears the caches when it just ended
            return 0.0
        return self.core.registration.lease_until - asyncio.get_running_loop().time()

    async def _tell_lease(self) -> None:
        """Tell nginx the lease (every ``LEASE_TELL_SECONDS``, and so again after a restart of
        nginx): it uses its entries only while the lease runs, asking the control service otherwise."""
        while True:
            with contextlib.suppress(httpx.HTTPError):
                await self.admin.lease(min(self.lease_left(), LEASE_UNREGISTERED_SECONDS))
            await asyncio.sleep(LEASE_TELL_SECONDS)

    async def in_flight(self, key: str) -> int:
        """Requests of actor ``key`` being proxied now: by nginx, and relayed (the hook for drain)."""
        return await self.admin.in_flight(key) + self.core.drains.in_flight(key)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Serve one request of nginx (ASGI)."""
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        path = scope["path"]
        if path.startswith(RELAY_PREFIX + "/"):
            client_scope = relayed(scope)
            if client_scope is None:
                if scope["type"] == "http":
                    await _send(send, 400, {}, b"a relayed request names no client (X-Ate-Peer)\n")
                else:
                    await send({"type": "websocket.close", "code": 1008})
                return
            await self.relay(client_scope, receive, send)
        elif scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
        elif path == "/route":
            await self._route(scope, receive, send)
        elif path == "/failed":
            await self._failed(scope, send)
        elif path == statusz.PATH:
            await self._statusz(scope, send)
        else:
            await _send(send, 404, {}, b"not found\n")

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _route(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        query = _query(scope)
        values = [v.encode("latin-1") for k, v in query if k == "t"]
        host_text = next((v for k, v in query if k == "h"), None)
        host = None if host_text is None else host_text.encode("latin-1")
        request_path = next((v for k, v in query if k == "u"), "/").split("?", 1)[0]
        unreachable = next((v for k, v in query if k == "x"), None)
        core = self.core
        if core.asks_statusz(request_path, values, host):
            await _send(send, 200, {"X-Ate-Statusz": "1"}, b"")
            return
        deadline = asyncio.get_running_loop().time() + self.settings.parked_request_budget_seconds
        try:
            target = core.target(values, host)
            admission = await core.admit(target, scope["headers"], deadline)
            if unreachable is not None:
                core.refused(target, unreachable, cached=True)  # nginx's cached worker refused: resume
            found = await core.find(
                target, deadline, leaving=lambda: _disconnect(receive), gone=_NginxGone
            )
            core.drains.leave(found.flight)  # nginx counts the request from here (its own flight)
        except TargetError as exc:
            await _answer(send, 400, str(exc), errors.BAD_TARGET)
            return
        except RouteError as exc:
            await _answer(send, exc.status, exc.message, exc.outcome, exc.retry_after)
            return
        except _NginxGone:
            return
        upstream, parked = found.upstream, found.parked
        cacheable = self.core.cache.enabled and self.core.cache.get(target.key) == upstream
        scope_of_entry = "no" if not cacheable else ("public" if admission.public else "token")
        headers = {
            "X-Ate-Outcome": errors.PARKED_OK if parked else errors.OK,
            "X-Ate-Actor": target.key,
            "X-Ate-Upstream": str(upstream),
            "X-Ate-Host": _upstream_host(upstream),
            "X-Ate-Strip": "1" if admission.strips_credential else "0",
            "X-Ate-Parked": "1" if parked else "0",
            "X-Ate-Cache": scope_of_entry,
            "X-Ate-Token": str(found.token),
            "X-Ate-Lease": f"{min(self.lease_left(), LEASE_UNREGISTERED_SECONDS):.3f}",
        }
        await _send(send, 200, headers, b"")

    async def _failed(self, scope: dict[str, Any], send: Any) -> None:
        query = dict(_query(scope))
        key, upstream, kind = query.get("actor", ""), query.get("upstream", ""), query.get("kind", "")
        atespace, _, name = key.partition("/")
        if not (is_label(atespace) and is_label(name)):
            await _answer(send, 502, f"the router failed to reach actor {key!r}", errors.ERROR)
            return
        target = ActorRef(atespace, name)
        error: RouteError
        if kind == "connect":
            error = worker_unreachable(target, upstream)
        elif kind == "timeout":
            missing = MISSING_END if query.get("what") == "request" else missing_head(
                self.settings.response_head_timeout_seconds
            )
            error = response_head_timeout(key, upstream, missing)
        elif kind == "cut":
            error = cut_by_drain(key)
        else:
            error = upstream_failed(key, upstream, "it closed the connection or sent no valid HTTP response head")
        await _answer(send, error.status, error.message, error.outcome, error.retry_after)

    async def _statusz(self, scope: dict[str, Any], send: Any) -> None:
        recent = merged_recent(await self.admin.recent(), self.core.recent.items())
        data, kind = await self.core.status_page(scope.get("query_string", b""), recent)
        await _send(send, 200, {"Content-Type": kind, "Cache-Control": "no-store"}, data)


PEER_HEADER = b"x-ate-peer"
"""The header in which nginx gives a relayed request's client address (``host:port``)."""

CONNECTION_HEADER = b"x-ate-connection"
"""The header in which nginx gives a relayed request's own ``Connection`` header."""


def relayed(scope: dict[str, Any]) -> dict[str, Any] | None:
    """The ASGI scope of a request nginx relayed, as the client sent it: the path without
    ``RELAY_PREFIX``, the client's address from ``PEER_HEADER`` and its own ``Connection``
    header from ``CONNECTION_HEADER`` (nginx sends its own; the Python proxy drops the headers
    the client's names); None without a peer address (nginx always gives one)."""
    path = scope["path"][len(RELAY_PREFIX) :]
    raw_path = scope.get("raw_path") or scope["path"].encode()
    given = dict((k, v) for k, v in scope["headers"] if k in (PEER_HEADER, CONNECTION_HEADER))
    host, _, port = given.get(PEER_HEADER, b"").decode("latin-1").rpartition(":")
    if not host or not port.isdigit():
        return None
    headers = [(k, v) for k, v in scope["headers"] if k not in (PEER_HEADER, CONNECTION_HEADER, b"connection")]
    if given.get(CONNECTION_HEADER):
        headers.append((b"connection", given[CONNECTION_HEADER]))
    elif scope["type"] == "websocket":
        headers.append((b"connection", b"upgrade"))
    client = (host.strip("[]"), int(port))
    return {**scope, "path": path, "raw_path": raw_path[len(RELAY_PREFIX) :], "headers": headers, "client": client}


def merged_recent(
    nginx: list[statusz.RecentRequest], relayed_requests: list[statusz.RecentRequest]
) -> list[statusz.RecentRequest]:
    """The last ``statusz.RECENT`` requests of both lists (nginx's and the relayed ones), newest first."""
    return sorted([*nginx, *relayed_requests], key=lambda r: r.time, reverse=True)[: statusz.RECENT]


class _NginxGone(Exception):
    """nginx dropped the subrequest (its client left while parked)."""


def _query(scope: dict[str, Any]) -> list[tuple[str, str]]:
    """Query arguments with their bytes kept (as Latin-1 text: ``.encode("latin-1")`` restores them)."""
    raw = scope.get("query_string", b"").decode("latin-1")
    return parse_qsl(raw, keep_blank_values=True, encoding="latin-1")


async def _disconnect(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _send(send: Any, status: int, headers: dict[str, str], body: bytes) -> None:
    pairs = [(k.lower().encode(), v.encode("latin-1")) for k, v in headers.items()]
    pairs.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": pairs})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _answer(send: Any, status: int, message: str, outcome: str, retry_after: int | None = None) -> None:
    """The router's own one-line answer, as the Python data path gives it, for nginx to relay."""
    data = (" ".join(message.split()) + "\n").encode()
    headers = {"X-Ate-Outcome": outcome}
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    await _send(send, status, headers, data)
