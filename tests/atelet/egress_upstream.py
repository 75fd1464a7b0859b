"""A stand-in upstream for the egress tests, run inside a network namespace of the test's own.

``python egress_upstream.py RECORD ADDRESS[=CERT,KEY] ...`` serves HTTP on port 80 and, given a
certificate, HTTPS on port 443 of each ADDRESS, answering every request with JSON of what
arrived: ``{"address", "host", "path", "headers", "sni", "tls"}`` (but a path under ``/quiet``:
``{"ok": true}``; ``/slow/<ms>`` is answered after that many milliseconds). Every accepted connection and
every request is appended to RECORD as a JSON line (``{"event": "connection"|"request", ...}``),
so a test can also tell that nothing reached an address at all. Standard library only; no name
is ever resolved (``server_bind`` skips ``HTTPServer``'s reverse lookup).
"""

from __future__ import annotations

import json
import socketserver
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOCK = threading.Lock()


def record(path: str, entry: dict[str, Any]) -> None:
    with LOCK, open(path, "a") as out:
        out.write(json.dumps(entry) + "\n")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    record_path = ""
    tls = False

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "standin", int(self.server_address[1])

    def verify_request(self, request: Any, client_address: Any) -> bool:
        record(self.record_path, {"event": "connection", "address": self.server_address[0],
                                  "port": self.server_address[1], "peer": client_address[0]})
        return True


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def _answer(self) -> None:
        server = self.server
        assert isinstance(server, Server)
        entry = {
            "address": server.server_address[0], "host": self.headers.get("Host"), "path": self.path,
            "method": self.command, "headers": {k.lower(): v for k, v in self.headers.items()},
            "sni": getattr(self.connection, "ate_sni", None), "tls": server.tls,
        }
        record(server.record_path, {"event": "request", **entry})
        if self.path.startswith("/slow/"):  # /slow/<ms>: answered that late
            time.sleep(int(self.path.split("/")[2]) / 1000)
        # /quiet/...: answered without what arrived, so nothing of the request goes back to the actor
        body = b'{"ok": true}' if self.path.startswith("/quiet") else json.dumps(entry).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def log_message(self, *args: object) -> None:
        pass


def serve(record_path: str, address: str, port: int, cert: tuple[str, str] | None) -> None:
    server = Server((address, port), Handler)
    server.record_path = record_path
    if cert is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*cert)

        def on_sni(sock: ssl.SSLObject, name: str | None, _: ssl.SSLContext) -> None:
            sock.ate_sni = name  # type: ignore[union-attr]

        context.sni_callback = on_sni  # type: ignore[assignment]
        server.socket = context.wrap_socket(server.socket, server_side=True)
        server.tls = True
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main(argv: list[str]) -> None:
    record_path = argv[1]
    for spec in argv[2:]:
        address, _, files = spec.partition("=")
        serve(record_path, address, 80, None)
        if files:
            cert, key = files.split(",")
            serve(record_path, address, 443, (cert, key))
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv)
