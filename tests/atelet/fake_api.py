"""A small real HTTP server standing in for ate-api-server in atelet tests.

Like the API, it takes node requests only with a bearer token that the node CA's verifier
(`api.access.node_certificates`, the test session's CA) proves to be of the node in the path,
and answers 401 otherwise. Records every request (refused ones too, with `node` None); answers heartbeats with ``{"node", "workers", "terminate": <terminate>}``
(or an empty body when ``old_api``), events with ``{"accepted": true}`` (after ``fail_events``
failures with 503), drain calls with ``{"accepted": true}`` after running ``on_drain`` in a
thread of its own, and the egress route (``GET .../workers/<w>/actors/<a>/<n>/egress``) with
``egress["<a>/<n>"]`` (the policy document with each credential's ``value``), 404 for an actor
not in it, and the images route (``GET /v1/nodes/<node>/images``) with ``images``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from api.access.node_certificates import NodeCertificateVerifier
from tests.atelet.conftest import certificates


@dataclass
class Received:
    """One request: method, path, JSON body, the monotonic time it arrived, and the node its token proved."""

    method: str
    path: str
    body: Any
    at: float
    node: str | None = None


@dataclass
class FakeApi:
    """State of the stand-in; tests change ``terminate`` / ``fail_events`` / ``on_drain`` freely."""

    url: str = ""
    received: list[Received] = field(default_factory=list)
    terminate: list[dict[str, Any]] = field(default_factory=list)
    old_api: bool = False
    fail_events: int = 0
    on_drain: Callable[[], None] | None = None
    egress: dict[str, Any] = field(default_factory=dict)
    images: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def of(self, method: str, suffix: str) -> list[Received]:
        """Requests of ``method`` whose path ends with ``suffix``."""
        with self.lock:
            return [r for r in self.received if r.method == method and r.path.endswith(suffix)]

    def events(self) -> list[Received]:
        """Every POST to /events (answered or failed)."""
        return self.of("POST", "/events")

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        """Polls ``predicate`` (every 20 ms) until true; False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(0.02)
        return predicate()


@contextmanager
def fake_api(host: str = "127.0.0.1") -> Iterator[FakeApi]:
    """Serves a FakeApi on `host` (a free port) for the duration of the block."""
    api = FakeApi()
    verifier = NodeCertificateVerifier(certificates().ca.read_bytes())

    class Handler(BaseHTTPRequestHandler):
        def _proved(self) -> str | None:
            """The node the bearer token proves, when it is the path's node."""
            scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
            node = verifier.verify(token) if scheme == "Bearer" else None
            parts = self.path.split("/")  # /v1/nodes/<node>[/events|/drain]
            return node if len(parts) > 3 and parts[3] == node else None

        def _record(self, method: str, body: Any) -> bool:
            """Records the request; answers 401 and returns False when its token does not prove its node."""
            node = self._proved()
            with api.lock:
                api.received.append(Received(method, self.path, body, time.monotonic(), node))
            if node is None:
                self._answer(401, {"detail": "no valid node token"})
            return node is not None

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            return json.loads(raw) if raw else None

        def _answer(self, code: int, doc: Any) -> None:
            data = b"" if doc is None else json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self) -> None:
            body = self._body()
            if not self._record("PUT", body):
                return
            with api.lock:
                terminate = list(api.terminate)
            if api.old_api:
                self._answer(200, None)
            else:
                node = self.path.rsplit("/", 1)[-1]
                self._answer(200, {"node": node, "workers": len(body["workers"]), "terminate": terminate})

        def do_GET(self) -> None:
            if not self._record("GET", None):
                return
            parts = self.path.split("/")  # /v1/nodes/<node>/workers/<w>/actors/<a>/<n>/egress
            if len(parts) == 5 and parts[4] == "images":  # /v1/nodes/<node>/images
                with api.lock:
                    self._answer(200, {"images": list(api.images)})
                return
            with api.lock:
                document = api.egress.get("/".join(parts[7:9])) if len(parts) == 10 and parts[9] == "egress" else None
            if document is None:
                self._answer(404, {"reason": "NOT_FOUND", "message": "no such actor here", "details": {}})
            else:
                self._answer(200, document)

        def do_POST(self) -> None:
            body = self._body()
            if not self._record("POST", body):
                return
            with api.lock:
                failing = self.path.endswith("/events") and api.fail_events > 0
                if failing:
                    api.fail_events -= 1
            if failing:
                self._answer(503, {"detail": "try later"})
                return
            if self.path.endswith("/drain") and api.on_drain is not None:
                threading.Thread(target=api.on_drain, daemon=True).start()
            self._answer(200, {"accepted": True})

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((host, 0), Handler)
    api.url = f"http://{host}:{server.server_port}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
