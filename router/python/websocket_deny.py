"""How the router refuses a WebSocket before its handshake (its own one-line answer, or the
worker's HTTP answer to the upgrade) and which of the worker's handshake headers it relays.
Split from router.python.websocket, which routes and opens the WebSocket."""

from __future__ import annotations

import contextlib

from websockets.asyncio.client import ClientConnection

from router.python.asgi import Scope, Send
from router.python.headers import HOP_BY_HOP
from router.python.websocket_relay import close_reason

HANDSHAKE_HEADERS = frozenset(
    {
        b"sec-websocket-key",
        b"sec-websocket-version",
        b"sec-websocket-extensions",
        b"sec-websocket-protocol",
        b"sec-websocket-accept",
        b"connection",
    }
)
DROP_RESPONSE = HOP_BY_HOP | HANDSHAKE_HEADERS | {b"date", b"server", b"content-length"}


class WorkerRefused(Exception):
    """The worker answered the handshake with an HTTP response instead of 101."""

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes, parked: bool) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.headers = headers
        self.body = body
        self.parked = parked



def accept_headers(worker: ClientConnection) -> list[tuple[bytes, bytes]]:
    """The worker's handshake answer headers worth relaying (cookies, its own), no framing."""
    response = worker.response
    if response is None:
        return []
    out = [(k.lower().encode(), v.encode("latin-1")) for k, v in response.headers.raw_items()]
    return [(k, v) for k, v in out if k not in DROP_RESPONSE and k != b"x-request-id"]



class Denier:
    """Refuses a WebSocket request before its handshake: with an HTTP answer when the server
    has the ``websocket.http.response`` extension, else accept-then-close with 4000 + status."""

    def __init__(self, scope: Scope, send: Send, request_id: bytes) -> None:
        self.http = "websocket.http.response" in (scope.get("extensions") or {})
        self.send = send
        self.request_id = request_id

    async def text(self, status: int, message: str, retry_after: int | None = None) -> None:
        """Refuse with the router's one-line text (as the HTTP path answers)."""
        data = (" ".join(message.split()) + "\n").encode()
        headers = [(b"content-type", b"text/plain; charset=utf-8")]
        if retry_after is not None:
            headers.append((b"retry-after", str(retry_after).encode()))
        await self._refuse(status, headers, data, message)

    async def relay(self, refused: WorkerRefused) -> None:
        """Refuse with the worker's own HTTP answer."""
        headers = [(k, v) for k, v in refused.headers if k not in DROP_RESPONSE and k != b"x-request-id"]
        reason = f"the actor refused the WebSocket with HTTP {refused.status}"
        await self._refuse(refused.status, headers, refused.body, reason)

    async def _refuse(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes, reason: str) -> None:
        with contextlib.suppress(OSError):  # the client left meanwhile
            if self.http:
                headers = [
                    *headers,
                    (b"content-length", str(len(body)).encode()),
                    (b"x-request-id", self.request_id),
                ]
                await self.send({"type": "websocket.http.response.start", "status": status, "headers": headers})
                await self.send({"type": "websocket.http.response.body", "body": body})
            else:
                await self.send({"type": "websocket.accept", "headers": [(b"x-request-id", self.request_id)]})
                await self.send({"type": "websocket.close", "code": 4000 + status, "reason": close_reason(reason)})
