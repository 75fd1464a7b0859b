"""A small real HTTP server standing in for ate-api-server in atelet tests.

Records every request; answers heartbeats with ``{"node", "workers", "terminate": <terminate>}``
(or an empty body when ``old_api``), events with ``{"accepted": true}`` (after ``fail_events``
failures with 503), and drain calls with ``{"accepted": true}`` after running ``on_drain`` in a
thread of its own.
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


@dataclass
class Received:
    """One request: method, path, JSON body and the monotonic time it arrived."""

    method: str
    path: str
    body: Any
    at: float


@dataclass
class FakeApi:
    """State of the stand-in; tests change ``terminate`` / ``fail_events`` / ``on_drain`` freely."""

    url: str = ""
    received: list[Received] = field(default_factory=list)
    terminate: list[dict[str, Any]] = field(default_factory=list)
    old_api: bool = False
    fail_events: int = 0
    on_drain: Callable[[], None] | None = None
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

    class Handler(BaseHTTPRequestHandler):
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
            with api.lock:
                api.received.append(Received("PUT", self.path, body, time.monotonic()))
                terminate = list(api.terminate)
            if api.old_api:
                self._answer(200, None)
            else:
                node = self.path.rsplit("/", 1)[-1]
                self._answer(200, {"node": node, "workers": len(body["workers"]), "terminate": terminate})

        def do_POST(self) -> None:
            body = self._body()
            with api.lock:
                api.received.append(Received("POST", self.path, body, time.monotonic()))
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
