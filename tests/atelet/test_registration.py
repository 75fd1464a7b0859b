"""Registration and heartbeats reach the API server (hollow atelet, a stub HTTP server)."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.atelet.conftest import make_settings, running_atelet


@pytest.mark.asyncio
async def test_registers_and_heartbeats(tmp_path: Path) -> None:
    received: list[tuple[str, dict]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, json.loads(body)))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        settings = make_settings(tmp_path, hollow=True, api_server=f"http://127.0.0.1:{server.server_port}",
                                 heartbeat_seconds=0.2)
        async with running_atelet(settings):
            for _ in range(100):
                if len(received) >= 2:
                    break
                await asyncio.sleep(0.05)
        path, doc = received[0]
        assert path == f"/v1/nodes/{settings.node}"
        assert doc["address"] == settings.listen
        assert [w["name"] for w in doc["workers"]] == ["default-0", "default-1"]
        assert set(doc["workers"][0]) == {"name", "pool", "ip", "sandbox_class", "labels", "places",
                                          "cpu_millis", "memory_bytes"}
        assert len(received) >= 2
    finally:
        server.shutdown()
