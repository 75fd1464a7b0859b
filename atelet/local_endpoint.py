"""The node's local endpoint: an actor asks ate for things from inside its sandbox (issue 27).

A sandbox calls ``http://169.254.100.1`` (``domain.local_endpoint``) with no token. Two rules
bring the call here and nowhere else (``local_endpoint_rules``): the nat table redirects TCP to
that address and port 80, arriving from one of this node's veths, to the port this endpoint
listens on (``settings.local_endpoint_port``) at the address of the veth it came in on (the
worker's own gateway); the isolation chain (``atelet.isolation``) lets through exactly that:
from worker ``i``'s veth, source its worker address, to its gateway and that port. Every other
connection of a sandbox to the host is still dropped.

The endpoint listens on each worker's gateway only (never a wildcard address: a worker pod's IP
and the host's own addresses do not reach it) and knows the caller from the connection: the
local address is a worker's gateway and the peer that worker's own address, or the call is
refused. The actor is whatever runs on that worker now; a request header ``ate-target-actor``
naming another actor is refused (the endpoint acts for the caller only). The call is relayed to
the API server with the node's credentials, under
``/v1/nodes/<node>/workers/<worker>/actors/<atespace>/<name>``, and the API acts only when that
worker holds that actor. So an actor reaches nothing of the control plane but these routes, and
for itself only.

The API (paths under ``/v1/self``; bodies and answers JSON, as the API's):

- ``GET /v1/self``: the actor as the API shows it (state, idle policy, time idle, next step).
- ``POST /v1/self/suspend`` ``{"action": "Suspend"|"Pause", "linger_seconds": 0..3600}``: 202;
  the actor is suspended (paused) once the linger passed and its answers in flight are sent.
- ``PUT /v1/self/idle`` (an idle policy, as a template's ``idle``), ``DELETE /v1/self/idle``.
- ``POST /v1/self/wakes`` ``{"name", "after_seconds" | "at", "path"}``: 201; ``GET /v1/self/wakes``;
  ``DELETE /v1/self/wakes/<name>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
from collections.abc import Generator

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from atelet.workers import Worker
from domain.reasons import Reason

log = logging.getLogger(__name__)

PREFIX = "/v1/self"
ROUTES: dict[str, frozenset[str]] = {
    "": frozenset({"GET"}),
    "/suspend": frozenset({"POST"}),
    "/idle": frozenset({"PUT", "DELETE"}),
    "/wakes": frozenset({"GET", "POST"}),
}
WAKE = re.compile(r"^/wakes/[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)
MAX_BODY_BYTES = 64 * 1024
TARGET_HEADER = "ate-target-actor"


def _error(status: int, reason: Reason, message: str) -> JSONResponse:
    """The API's error format, `{reason, message, details}`, for a refusal of the endpoint itself."""
    return JSONResponse({"reason": reason.value, "message": message, "details": {}}, status_code=status)


class LocalEndpoint:
    """The endpoint of one node: ``serve`` listens on every worker's gateway until ``stop``.

    Args:
        node: this node's name (the API routes' ``{node}``).
        workers: the node's workers by name (``Node.workers``); read at each call.
        api_server: the API server's URL.
        auth: the node's credentials (``atelet.node_identity.NodeCredentials``).
        port: the TCP port it listens on at each gateway.
    """

    def __init__(self, node: str, workers: dict[str, Worker], api_server: str, auth: httpx.Auth, port: int) -> None:
        self.node = node
        self.workers = workers
        self.api_server = api_server.rstrip("/")
        self.auth = auth
        self.port = port
        self.app = Starlette(routes=[Route("/{path:path}", self.handle, methods=["GET", "POST", "PUT", "DELETE"])])
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None

    def caller(self, local: str, peer: str) -> Worker | None:
        """The worker whose gateway is ``local`` and whose own address is ``peer``, if any."""
        for worker in self.workers.values():
            if worker.net.host_ip == local and worker.net.worker_ip == peer:
                return worker
        return None

    async def handle(self, request: Request) -> Response:
        """One call of a sandbox: identify it, check the path, relay it to the API."""
        # The body is read before any answer: a refusal sent while the request's body is still
        # unread makes the server close the connection under the client, which may then lose
        # the refusal's own body (seen: a 403 whose message the sandbox never got).
        body = await request.body()
        server, client = request.scope.get("server"), request.scope.get("client")
        worker = self.caller(server[0], client[0]) if server and client else None
        if worker is None:
            return _error(403, Reason.PERMISSION_DENIED, "the local endpoint answers the sandboxes of this node only, each "
                          "from its own worker's network")  # fmt: skip
        actor = worker.actor
        if actor is None or worker.state != "running":
            return _error(409, Reason.FAILED_PRECONDITION, f"no actor runs on worker {worker.name} now")
        key = f"{actor[0]}/{actor[1]}"
        target = request.headers.get(TARGET_HEADER)
        if target is not None and target.strip() != key:
            return _error(403, Reason.PERMISSION_DENIED, f"the local endpoint acts only for the actor calling it ({key}); "
                          f"{TARGET_HEADER} names {target.strip()[:200]!r}")  # fmt: skip
        path = request.url.path
        suffix = path[len(PREFIX) :] if path == PREFIX or path.startswith(PREFIX + "/") else None
        if suffix is None or (suffix not in ROUTES and not WAKE.match(suffix)):
            return _error(404, Reason.NOT_FOUND, f"no such path {path[:200]!r}: the local endpoint serves GET /v1/self, "
                          "POST /v1/self/suspend, PUT|DELETE /v1/self/idle, GET|POST /v1/self/wakes and "
                          "DELETE /v1/self/wakes/<name>")  # fmt: skip
        methods = ROUTES.get(suffix, frozenset({"DELETE"}))  # else /wakes/<name>
        if request.method not in methods:
            return _error(405, Reason.METHOD_NOT_ALLOWED, f"{request.method} is not allowed on {path}; use "
                          f"{' or '.join(sorted(methods))}")  # fmt: skip
        if len(body) > MAX_BODY_BYTES:
            return _error(413, Reason.REQUEST_TOO_LARGE, f"the body is {len(body)} bytes; at most {MAX_BODY_BYTES}")
        url = f"{self.api_server}/v1/nodes/{self.node}/workers/{worker.name}/actors/{actor[0]}/{actor[1]}{suffix}"
        try:
            answer = await self._http().request(
                request.method, url, content=body or None,
                headers={"content-type": request.headers.get("content-type", "application/json")} if body else None,
            )  # fmt: skip
        except httpx.HTTPError as error:
            log.warning("local endpoint: %s %s for %s failed: %s", request.method, suffix, key, error)
            return _error(503, Reason.UNAVAILABLE, "the control plane did not answer; try again shortly")
        log.info("local endpoint: %s %s%s for %s: %d", request.method, PREFIX, suffix, key, answer.status_code)
        return Response(answer.content, status_code=answer.status_code,
                        media_type=answer.headers.get("content-type", "application/json"))  # fmt: skip

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(30.0), auth=self.auth)
        return self._client

    def sockets(self) -> list[socket.socket]:
        """One listening socket per worker, on its gateway (bound before the address exists, as
        the veth may be made later: IP_FREEBIND)."""
        made = []
        for worker in self.workers.values():
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
            sock.bind((worker.net.host_ip, self.port))
            sock.listen(128)
            sock.setblocking(False)
            made.append(sock)
        return made

    async def start(self) -> None:
        """Listens on every worker's gateway.

        Raises:
            OSError: a gateway's port is taken (another atelet of this machine on the same subnet).
        """
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off")
        self._server = _Server(config)
        sockets = self.sockets()
        self._task = asyncio.create_task(self._server.serve(sockets=sockets))
        while not self._server.started and not self._task.done():
            await asyncio.sleep(0.01)
        if self._task.done():
            self._task.result()
        log.info("local endpoint: listening on port %d of %d worker gateways", self.port, len(sockets))

    async def stop(self) -> None:
        """Stops listening (calls in flight get a second to finish)."""
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self._task, 5)
        if self._client is not None:
            await self._client.aclose()


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the atelet handles SIGTERM and SIGINT itself."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield
