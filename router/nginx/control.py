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

The control path is the Python router's own: target parsing (router.core.target), access
(router.core.access), resume and parking (router.core.resume), the RUNNING-actor cache with its LISTEN
(router.core.cache) and the error texts. Every invalidation of that cache is pushed to nginx's
admin server (router.nginx.admin): a NOTIFY about an actor forgets it there too, a lost or re-made
LISTEN forgets everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import Any, cast
from urllib.parse import parse_qsl

import httpx

from domain.refs import ActorRef
from router.core import errors, statusz
from router.core.api_client import ApiClient
from router.core.cache import ActorCache
from router.core.errors import RouteError
from router.core.target import TargetError, is_label, target_from_headers
from router.core.upstream import Upstream
from router.nginx.admin import NginxAdmin
from router.nginx.config import RELAY_PREFIX
from router.nginx.drain import NginxDrainGate
from router.nginx.metrics import NginxRequestMetrics, RelayedTally
from router.python.app import ActorRouter, worker_unreachable
from router.python.proxy import cut_by_drain, response_head_timeout, upstream_failed
from router.python.upstream_client import MISSING_END, missing_head
from router.settings import RouterSettings

log = logging.getLogger(__name__)


class _NotifyingCache(ActorCache):
    """An ``ActorCache`` whose every forgetting is pushed to nginx as well."""

    def __init__(self, admin: NginxAdmin) -> None:
        super().__init__()
        self.admin = admin

    def drop(self, key: str) -> None:
        super().drop(key)
        self.admin.invalidate(key)

    def clear(self) -> None:
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

    The control path is a Python router (router.python.app.ActorRouter) whose cache tells nginx what
    it forgets and whose drains are carried out in nginx as well (router.nginx.drain). The
    requests nginx relays under ``/relay`` (WebSockets, requests asking for an event stream,
    chunked uploads) are proxied by that Python router itself, so a drain or a stop ends them the clean
    way (close 1001 with a reason; the end of the stream) as on the Python data path.

    Args:
        settings: Router settings.
        admin_socket: nginx's admin socket.
        api_client: Optional API client (built from settings when omitted).

    Attributes:
        router: The Python router of the control path (cache, gate, resumer, drains, sessions).
        cache: RUNNING-actor cache (its forgetting reaches nginx).
        gate: router.core.access.AccessGate.
        resumer: router.core.resume.Resumer (the parking lot).
        invalidator: LISTEN loop, or None without a database URL (nothing cached anywhere).
        admin: The nginx admin client.
        metrics: The request counters as Prometheus families (nginx's and the relayed requests').
        drains: The drains before a checkpoint, carried out in nginx (router.nginx.drain) and in
            the relayed requests.
        sessions: The relayed WebSockets and event streams open now.
        recent: The relayed requests finished last (nginx lists the others).
        registration: This replica's heartbeat, lease and drains (router.core.registration), or
            None when ``settings.register_replica`` is off.
    """

    def __init__(self, settings: RouterSettings, admin_socket: str, api_client: ApiClient | None = None) -> None:
        self.settings = settings
        self.admin = NginxAdmin(admin_socket)
        relayed = RelayedTally()
        self.router = ActorRouter(
            settings,
            api_client,
            cache=_NotifyingCache(self.admin),
            drain_gate=functools.partial(NginxDrainGate, self.admin),
            observe=relayed.observe,
        )
        self.api = self.router.api
        self.cache = self.router.cache
        self.gate = self.router.gate
        self.resumer = self.router.resumer
        self.invalidator = self.router.invalidator
        self.drains = cast(NginxDrainGate, self.router.drains)
        self.sessions = self.router.sessions
        self.recent = self.router.recent
        self.registration = self.router.registration
        self.metrics = NginxRequestMetrics(self.admin, relayed)
        self._lease_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start pushing invalidations to nginx, the LISTEN loop, the registration (its first
        heartbeat waited for) and telling nginx how long the lease runs."""
        self.admin.start()
        await self.router.start()
        self._lease_task = asyncio.create_task(self._tell_lease(), name="ate-router-nginx-lease")

    async def stop(self) -> None:
        """Stop the lease, the registration, the LISTEN loop and close the clients."""
        if self._lease_task is not None:
            self._lease_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._lease_task
        await self.router.stop()
        await self.admin.stop()

    def lease_left(self) -> float:
        """Seconds this replica's lease runs still (0 when over; unbounded without registration)."""
        if self.registration is None:
            return LEASE_UNREGISTERED_SECONDS
        if not self.registration.leased():  # also clears the caches when it just ended
            return 0.0
        return self.registration.lease_until - asyncio.get_running_loop().time()

    async def _tell_lease(self) -> None:
        """Tell nginx the lease (every ``LEASE_TELL_SECONDS``, and so again after a restart of
        nginx): it uses its entries only while the lease runs, asking the control service otherwise."""
        while True:
            with contextlib.suppress(httpx.HTTPError):
                await self.admin.lease(min(self.lease_left(), LEASE_UNREGISTERED_SECONDS))
            await asyncio.sleep(LEASE_TELL_SECONDS)

    async def in_flight(self, key: str) -> int:
        """Requests of actor ``key`` being proxied now: by nginx, and relayed (the hook for drain)."""
        return await self.admin.in_flight(key) + self.drains.in_flight(key)

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
            await self.router(client_scope, receive, send)
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
        if request_path == statusz.PATH and not values and not self._names_actor(host):
            await _send(send, 200, {"X-Ate-Statusz": "1"}, b"")
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.parked_request_budget_seconds
        try:
            target = target_from_headers(values, host, self.settings.domain)
            admission = await self.gate.admit(target, scope["headers"], deadline)
            if unreachable is not None:
                log.info("cached actor %s unreachable at %s: resuming again", target, unreachable)
                if str(self.cache.get(target.key)) == unreachable:
                    self.cache.drop(target.key)
            upstream, parked, token = await self._upstream(target, deadline, receive)
        except TargetError as exc:
            await _answer(send, 400, str(exc), errors.BAD_TARGET)
            return
        except RouteError as exc:
            await _answer(send, exc.status, exc.message, exc.outcome, exc.retry_after)
            return
        except _NginxGone:
            return
        cacheable = self.cache.enabled and self.cache.get(target.key) == upstream
        scope_of_entry = "no" if not cacheable else ("public" if admission.public else "token")
        headers = {
            "X-Ate-Outcome": errors.PARKED_OK if parked else errors.OK,
            "X-Ate-Actor": target.key,
            "X-Ate-Upstream": str(upstream),
            "X-Ate-Host": _upstream_host(upstream),
            "X-Ate-Strip": "1" if admission.strips_credential else "0",
            "X-Ate-Parked": "1" if parked else "0",
            "X-Ate-Cache": scope_of_entry,
            "X-Ate-Token": str(token),
            "X-Ate-Lease": f"{min(self.lease_left(), LEASE_UNREGISTERED_SECONDS):.3f}",
        }
        await _send(send, 200, headers, b"")

    async def _upstream(self, target: ActorRef, deadline: float, receive: Any) -> tuple[Upstream, bool, int]:
        """Where actor ``target`` serves, looked up after any drain of it began (held while it
        runs, then parked for the resume), whether the request was parked, and the drain token
        taken before the lookup (nginx refuses the answer when a drain of the actor came since).

        Raises:
            RouteError: From resuming; 503 when this replica has no lease.
            _NginxGone: nginx dropped the request while it was parked.
        """
        key = target.key
        while True:
            if not self.drains.leased():
                raise self.router.no_lease(target)
            token = self.drains.token()
            upstream = self.cache.get(key)
            parked = upstream is None
            if upstream is None:
                upstream = await self._park(target, deadline, receive)
            flight = self.drains.enter(key, token, upstream)
            if flight is not None:  # no drain since the lookup: nginx counts it from here
                self.drains.leave(flight)
                return upstream, parked, token

    async def _park(self, target: ActorRef, deadline: float, receive: Any) -> Upstream:
        """``ActorRouter.wait_running``, given up at once when nginx drops the request (its client
        left: nginx closes the subrequest); the resume goes on."""
        waiting = asyncio.create_task(self.router.wait_running(target, deadline))
        leaving = asyncio.create_task(_disconnect(receive))
        try:
            await asyncio.wait({waiting, leaving}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waiting, leaving):
                if not task.done():
                    task.cancel()
            await asyncio.wait({waiting, leaving})
        if waiting.cancelled():
            raise _NginxGone
        return waiting.result()

    async def _failed(self, scope: dict[str, Any], send: Any) -> None:
        query = dict(_query(scope))
        key, upstream, kind = query.get("actor", ""), query.get("upstream", ""), query.get("kind", "")
        atespace, _, name = key.partition("/")
        if not (is_label(atespace) and is_label(name)):
            await _answer(send, 502, f"the router failed to reach actor {key!r}", errors.ERROR)
            return
        target = ActorRef(atespace, name)
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

    def _names_actor(self, host: bytes | None) -> bool:
        try:
            target_from_headers([], host, self.settings.domain)
        except TargetError:
            return False
        return True

    async def _statusz(self, scope: dict[str, Any], send: Any) -> None:
        postgres = statusz.postgres_health(self.invalidator)
        document = statusz.status_document(
            settings=self.settings.redacted(),
            api=await self.api.health(),
            postgres=postgres,
            parked=self.resumer.parked,
            max_parked=self.settings.max_parked,
            recent=merged_recent(await self.admin.recent(), self.recent.items()),
        )
        as_json = b"format=json" in scope.get("query_string", b"").split(b"&")
        data = statusz.render_json(document) if as_json else statusz.render_html(document)
        kind = "application/json" if as_json else "text/html; charset=utf-8"
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
