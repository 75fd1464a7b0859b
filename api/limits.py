"""The request body limit of the api-server: an ASGI middleware that refuses a body larger than
`max_bytes` with 413 in the one error format, before the body is read.

A `Content-Length` above the limit is answered at once, without calling the app. A body sent
without one (chunked) is counted as the app reads it; the read that passes the limit raises
`BodyTooLarge`, which the error handlers answer with the same 413, after reading and dropping
what the client already sent of the rest (bounded, `_drain`). Either way the connection is closed
after the answer, and the rest of the body is never handed to the app.
"""

from __future__ import annotations

import asyncio
import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_body
from domain.reasons import Reason

DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024


def too_large_message(max_bytes: int) -> str:
    """The message of a 413."""
    return f"request body larger than {max_bytes} bytes; send less (the limit is the api-server's max_request_bytes)"


class BodyTooLarge(HTTPException):
    """A streamed body passed the limit (answered 413 by `api.errors`)."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, too_large_message(max_bytes), headers={"connection": "close"})


class BodySizeLimit:
    """ASGI middleware: bodies of at most `max_bytes` bytes."""

    def __init__(self, app: ASGIApp, max_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 413 for a declared length over the limit; count a streamed body."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            body = json.dumps(error_body(Reason.REQUEST_TOO_LARGE, too_large_message(self.max_bytes))).encode()
            await send({"type": "http.response.start", "status": 413, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ]})  # fmt: skip
            await send({"type": "http.response.body", "body": body})
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    if message.get("more_body", False):
                        await _drain(receive)
                    raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, counted, send)


DRAIN_SECONDS = 1.0
"""How long the rest of a refused streamed body is read and dropped before the 413 is sent."""

DRAIN_MAX_BYTES = 8 * 1024 * 1024
"""How much of the rest of a refused streamed body is read and dropped at most before the 413."""


async def _drain(receive: Receive) -> None:
    """Read and drop what the client already sent of a refused body (at most DRAIN_MAX_BYTES, for
    at most DRAIN_SECONDS), as nginx's lingering close does: a socket closed with unread bytes
    in its receive buffer is reset by the kernel, and the reset can destroy the 413 before the
    client has read it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DRAIN_SECONDS
    drained = 0
    while drained <= DRAIN_MAX_BYTES:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return
        try:
            message = await asyncio.wait_for(receive(), remaining)
        except TimeoutError:
            return
        if message["type"] != "http.request":
            return
        drained += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
