"""The request body of a proxied HTTP request, read lazily from ASGI ``receive``
(``BodyStream``): streamed to the worker as it arrives, read ahead (bounded) while the request
is parked so that a client that leaves is seen. Split from router.python.proxy."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from router.core.metrics import RECEIVED_BYTES
from router.python.asgi import Message, Receive
from router.python.upstream_errors import ClientGone, ClientIdle

PARK_READ_AHEAD_BYTES = 1024 * 1024
"""Request body bytes a parked request buffers while it watches for its client's disconnect;
past them it stops reading (and watching) until the actor is RUNNING."""


class BodyStream:
    """The request body, read lazily from ASGI ``receive``.

    Args:
        receive: The ASGI receive callable.
        idle_timeout_seconds: Longest wait for the client's next body chunk (None: no limit).

    Attributes:
        started: Whether any of the body was read (a retry is no longer possible).
        done: Whether the body was read to its end.
        disconnected: Whether the client was seen leaving by ``wait_disconnect``.
    """

    def __init__(self, receive: Receive, idle_timeout_seconds: float | None = None) -> None:
        self._receive = receive
        self._idle = idle_timeout_seconds
        self._ahead: list[Message] = []
        self._ahead_bytes = 0
        self.started = False
        self.done = False
        self.disconnected = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        """Yield body chunks as they arrive (first what ``wait_disconnect`` read ahead).

        Raises:
            ClientGone: The client disconnected before the body ended.
            ClientIdle: The client was silent longer than the idle timeout before it ended.
        """
        self.started = True
        while not self.done:
            if self._ahead:
                message = self._ahead.pop(0)
            else:
                try:
                    message = await asyncio.wait_for(self._receive(), self._idle)
                except TimeoutError:
                    raise ClientIdle(f"the request body stalled: no byte for {self._idle:g}s (idle timeout)") from None
            if message["type"] == "http.disconnect":
                raise ClientGone("client disconnected while sending the request body")
            self.done = not message.get("more_body", False)
            chunk = message.get("body", b"")
            if chunk:
                RECEIVED_BYTES.inc(len(chunk))
                yield chunk

    async def wait_disconnect(self) -> None:
        """Return when the client disconnects; meanwhile the body read is kept for ``__aiter__``
        (at most ``PARK_READ_AHEAD_BYTES``; past them this waits forever). For a request that
        waits (parked) before anything is sent upstream; cancel it when the wait ends (ASGI
        servers lose no message to a cancelled ``receive``)."""
        while self._ahead_bytes <= PARK_READ_AHEAD_BYTES:
            if self._ahead and self._ahead[-1]["type"] == "http.disconnect":
                break
            message = await self._receive()
            self._ahead.append(message)
            self._ahead_bytes += len(message.get("body", b""))
            if message["type"] == "http.disconnect":
                self.disconnected = True
                return
        await asyncio.Event().wait()

