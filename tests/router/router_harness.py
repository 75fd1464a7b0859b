"""Harness of the router tests: a real worker app, a stand-in API, uvicorn serving helpers.

Every server is a real uvicorn on 127.0.0.1 with an ephemeral port, run on the test's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

DOMAIN = "ate.local"


@dataclass
class Served:
    """A running uvicorn server."""

    url: str
    port: int
    server: uvicorn.Server


class _QuickServer(uvicorn.Server):
    """uvicorn server that notices ``should_exit`` within 10 ms (not 100 ms): faster tests."""

    async def main_loop(self) -> None:
        await self.on_tick(0)
        while not self.should_exit:
            await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def serve(app: Any, lifespan: str = "off") -> AsyncIterator[Served]:
    """Serve an ASGI app on 127.0.0.1:<ephemeral> until the block ends."""
    # proto=IPPROTO_TCP so asyncio sets TCP_NODELAY on accepted sockets (else 40 ms stalls).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, lifespan=lifespan, log_level="warning", access_log=False, proxy_headers=False,
        server_header=False, date_header=False, timeout_graceful_shutdown=1,
    )
    server = _QuickServer(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.005)
    try:
        yield Served(f"http://127.0.0.1:{port}", port, server)
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5)
        sock.close()



@dataclass
class WorkingWorker:
    """A raw worker that reads a request head and then works on it without ever answering;
    ``ended`` tells how the router let go of the connection: ``reset``, ``closed`` (a FIN) or the
    bytes it sent after the head."""

    server: asyncio.Server
    got_head: asyncio.Event
    ended: asyncio.Future[str]

    @property
    def port(self) -> int:
        return int(self.server.sockets[0].getsockname()[1])


async def working_worker() -> WorkingWorker:
    """Start a ``WorkingWorker`` on 127.0.0.1 (close its ``server`` afterwards)."""
    got_head = asyncio.Event()
    ended: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def working(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        got_head.set()
        try:
            rest = await reader.read()
            what = "closed" if rest == b"" else f"more bytes: {rest!r}"
        except ConnectionResetError:
            what = "reset"
        if not ended.done():
            ended.set_result(what)
        writer.close()

    server = await asyncio.start_server(working, "127.0.0.1", 0)
    return WorkingWorker(server, got_head, ended)

def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------- the worker


@dataclass
class WorkerLog:
    """What the worker saw."""

    client_ports: list[int] = field(default_factory=list)


def worker_app(log: WorkerLog) -> Any:
    """A raw ASGI app playing the actor on its worker.

    Paths: ``/upload`` (answers sha256 and length of the body), ``/download?n=`` (streams n
    deterministic bytes), ``/echo-body`` (streams the body back as it arrives), ``/early``
    (answers 413 at once without reading the body, as the example counter does), ``/sleep?s=``
    (its head after s seconds), ``/stall`` (one chunk, then a minute of silence), ``/drip`` (a
    byte every 50 ms for 10 s), anything else echoes method, path, query and headers as JSON.
    """

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        log.client_ports.append(scope["client"][1])
        path = scope["path"]
        if path == "/upload":
            digest, size = hashlib.sha256(), 0
            while True:
                message = await receive()
                digest.update(message.get("body", b""))
                size += len(message.get("body", b""))
                if not message.get("more_body"):
                    break
            data = json.dumps({"sha256": digest.hexdigest(), "size": size}).encode()
            await _send(send, 200, data, [(b"content-type", b"application/json")])
            return
        if path == "/sleep":  # the head after s seconds
            await asyncio.sleep(float(scope["query_string"].decode().removeprefix("s=")))
            await _send(send, 200, b"late\n", [(b"content-type", b"text/plain")])
            return
        if path == "/stall":  # one chunk, then silence
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"first\n", "more_body": True})
            await asyncio.sleep(60)
            return
        if path == "/drip":  # a byte every 50 ms for 10 s
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for _ in range(200):
                await send({"type": "http.response.body", "body": b".", "more_body": True})
                await asyncio.sleep(0.05)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        if path == "/early":
            await _send(send, 413, b"too big, not read\n", [(b"content-type", b"text/plain")])
            return
        if path == "/download":
            n = int(dict(p.split("=") for p in scope["query_string"].decode().split("&"))["n"])
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/octet-stream")]})
            sent = 0
            while sent < n:
                chunk = pattern(sent, min(65536, n - sent))
                sent += len(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        if path == "/echo-body":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            while True:
                message = await receive()
                await send({"type": "http.response.body", "body": message.get("body", b""),
                            "more_body": True})
                if not message.get("more_body"):
                    break
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        while (await receive()).get("more_body"):
            pass
        data = json.dumps({
            "method": scope["method"],
            "path": scope["path"],
            "raw_path": scope["raw_path"].decode(),
            "query": scope["query_string"].decode(),
            "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]],
        }).encode()
        await _send(send, 200, data, [
            (b"content-type", b"application/json"),
            (b"connection", b"x-worker-hop"),
            (b"x-worker-hop", b"secret"),
            (b"keep-alive", b"timeout=5"),
            (b"set-cookie", b"a=1"),
            (b"set-cookie", b"b=2"),
        ])

    return app


_CYCLE = bytes((i * 7 + 3) % 251 for i in range(251))


def pattern(offset: int, size: int) -> bytes:
    """Deterministic bytes ``offset .. offset+size`` of the download stream (period 251)."""
    start = offset % 251
    reps = (start + size) // 251 + 1
    return (_CYCLE * reps)[start : start + size]


async def _send(send: Any, status: int, data: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data, "more_body": False})


# ---------------------------------------------------------------------------- the API


@dataclass
class Step:
    """One scripted answer of the stand-in API's resume endpoint."""

    status: int = 200
    reason: str = ""
    message: str = ""
    delay: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)
    ip: str = "127.0.0.1"


class FakeApi:
    """Stand-in for the ate REST API: resume (scripted, counted), template, actor, access review
    and router replica (heartbeat listing `drains`, those of `idle_drains` as if_idle, with each
    heartbeat's `active` keys in `active`; acknowledgements in `acks`, the busy ones in `busy`) endpoints. Every actor exists (its template `web`) unless its key is in `missing`;
    template `web`'s access rule is `access`; `grants` maps a token to the actor keys it reaches."""

    def __init__(self, worker_port: int) -> None:
        self.worker_port = worker_port
        self.calls: Counter[str] = Counter()
        self.completed: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self.template_calls = 0
        self.in_flight: Counter[str] = Counter()
        self.max_in_flight = 0
        self.scripts: dict[str, list[Step]] = {}
        self.default = Step()
        self.missing: set[str] = set()
        self.access: dict[str, Any] = {"mode": "public", "passCredential": False}
        self.grants: dict[str, set[str]] = {}
        self.reviews: list[dict[str, Any]] = []
        self.actor_calls = 0
        self.drains: list[tuple[int, str]] = []
        self.acks: list[tuple[str, int]] = []
        self.busy: list[tuple[str, int]] = []
        self.idle_drains: set[int] = set()
        self.active: list[tuple[str, list[str]]] = []
        self.heartbeats: Counter[str] = Counter()
        self.released: list[str] = []
        self.refuse_heartbeats = False
        self.app = FastAPI()
        self.app.post("/v1/atespaces/{atespace}/actors/{name}/resume")(self.resume)
        self.app.get("/v1/atespaces/{atespace}/templates/{template}")(self.template)
        self.app.get("/v1/atespaces/{atespace}/actors/{name}")(self.actor)
        self.app.post("/v1/accessreviews")(self.review)
        self.app.get("/healthz")(self.healthz)
        self.app.put("/v1/routers/{replica}")(self.heartbeat)
        self.app.post("/v1/routers/{replica}/drains/{drain_id}/ack")(self.ack)
        self.app.delete("/v1/routers/{replica}", status_code=204)(self.release)

    def script(self, key: str, *steps: Step) -> None:
        """Answer resumes of ``key`` with ``steps`` in order, repeating the last one."""
        self.scripts[key] = list(steps)

    async def resume(self, atespace: str, name: str, request: Request) -> JSONResponse:
        key = f"{atespace}/{name}"
        index = self.calls[key]
        self.calls[key] += 1
        self.bodies.append(await request.json())
        steps = self.scripts.get(key, [self.default])
        step = steps[min(index, len(steps) - 1)]
        self.in_flight[key] += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight[key])
        try:
            await asyncio.sleep(step.delay)
        finally:
            self.in_flight[key] -= 1
        self.completed[key] += 1
        if step.status != 200:
            return JSONResponse(
                {"reason": step.reason, "message": step.message, "details": step.details},
                status_code=step.status,
            )
        return JSONResponse({
            "atespace": atespace, "name": name, "template": "web", "state": "RUNNING",
            "version": 3, "worker_selector": {},
            "worker": {"pool": "default", "name": "w-0", "node": "n1", "ip": step.ip},
            "latest_snapshot": None, "created_at": "2024-01-01T00:00:00Z",
            "updated_at": "2024-01-01T00:00:00Z",
        })

    async def template(self, atespace: str, template: str) -> JSONResponse:
        self.template_calls += 1
        return JSONResponse({
            "atespace": atespace, "name": template, "phase": "Ready",
            "spec": {"containers": [{"name": "app", "image": "oci:app:latest", "port": self.worker_port}],
                     "access": self.access},
        })

    async def actor(self, atespace: str, name: str) -> JSONResponse:
        self.actor_calls += 1
        if f"{atespace}/{name}" in self.missing:
            return JSONResponse({"reason": "NotFound", "message": f"actor {atespace}/{name} not found",
                                 "details": {}}, status_code=404)
        return JSONResponse({"atespace": atespace, "name": name, "template": "web", "state": "SUSPENDED"})

    async def heartbeat(self, replica: str, request: Request) -> JSONResponse:
        """A router replica's heartbeat: the drains of `drains` it has not acknowledged."""
        if self.refuse_heartbeats:
            return JSONResponse({"reason": "Unavailable", "message": "down", "details": {}}, status_code=503)
        self.heartbeats[replica] += 1
        self.active.append((replica, list((await request.json()).get("active", []))))
        pending = [(i, k) for i, k in self.drains if (replica, i) not in self.acks]
        drains = [
            {"id": i, "atespace": k.split("/")[0], "name": k.split("/")[1], "if_idle": i in self.idle_drains}
            for i, k in pending
        ]
        return JSONResponse({"replica": replica, "lease_seconds": 10.0, "drains": drains})

    async def release(self, replica: str) -> None:
        """A replica gives its lease back at its clean stop."""
        self.released.append(replica)

    async def ack(self, replica: str, drain_id: int, request: Request) -> JSONResponse:
        body = await request.body()
        if body and json.loads(body).get("busy"):
            self.busy.append((replica, drain_id))
        self.acks.append((replica, drain_id))
        return JSONResponse({"replica": replica, "drain_id": drain_id, "acknowledged": True})

    async def healthz(self) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def review(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.reviews.append(body)
        reached = self.grants.get(body["token"])
        allowed = reached is not None and f"{body['atespace']}/{body['actor']}" in reached
        return JSONResponse({"authenticated": reached is not None, "allowed": allowed, "principal": None})


# ---------------------------------------------------------------------------- the router


@dataclass
class Env:
    """A running router with its worker and API stand-in."""

    url: str
    api: FakeApi
    worker: Served
    worker_log: WorkerLog
    app: Any
    client: httpx.AsyncClient
    data_path: str = "python"
    access_log: Path | None = None
    api_url: str = ""

    @property
    def router(self) -> Any:
        """The ``ActorRouter`` (cache, resumer, ...), or with the nginx data path its
        ``ControlService`` (the same cache, gate and resumer)."""
        return self.app.state.router

    def outcome_count(self, outcome: str) -> float:
        """Requests counted with ``outcome`` (``ate_router_requests_total``) by this data path."""
        if self.data_path == "nginx":
            return float(self.router.metrics.count(outcome))
        from router.core.metrics import REQUESTS

        return float(REQUESTS.labels(outcome)._value.get())

    async def settled(self) -> None:
        """Return once the data path applied every cache invalidation made so far (the nginx
        data path pushes them to nginx; the Python one applies them at once)."""
        if self.data_path == "nginx":
            await self.router.admin.settled()

    async def logged(self, needle: str, caplog_messages: list[str]) -> list[str]:
        """The request log lines containing ``needle``: from the router's log (Python), or
        nginx's access log, which it writes right after the answer (waited for, 5 s at most)."""
        if self.data_path == "python":
            return [m for m in caplog_messages if needle in m]
        assert self.access_log is not None
        for _ in range(500):
            found = [line for line in self.access_log.read_text().splitlines() if needle in line]
            if found:
                return found
            await asyncio.sleep(0.01)
        return []


