"""uvicorn's httptools protocol with limits on the request head, which uvicorn lacks.

uvicorn (with httptools) accepts a request head of any size and waits for it forever: its
keep-alive timeout runs only between requests, is cancelled by every byte received, and is
not armed at all on a new connection. So one client that opens connections and sends nothing,
or sends its head a byte at a time (slowloris), or sends megabytes of headers, pins a
connection (and memory) each. This protocol:

- closes a connection whose request head (request line and headers) is not complete within
  `head_timeout_seconds` of the connection opening or of the head's first byte;
- answers 431 and closes when a head grows beyond `max_head_bytes` before it is complete.

The body and the response are not limited here (the api-server limits bodies itself,
`api.limits`; the router streams them). Build a class with `guarded_http` and give it to
`uvicorn.Config(http=...)`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("ate.serving")

DEFAULT_HEAD_TIMEOUT_SECONDS = 10.0
DEFAULT_MAX_HEAD_BYTES = 32 * 1024
LINGER_SECONDS = 2.0
"""After a refusal, how long what the client still sends is read and dropped before the
connection closes: closing with unread data would reset it and could lose the refusal."""

ErrorBody = Callable[[int, str], tuple[bytes, bytes]]
"""(status, message) -> (content type, body) of a refusal written before any app runs."""


def plain_text(status: int, message: str) -> tuple[bytes, bytes]:
    """A refusal as plain text: the message and a newline."""
    return b"text/plain; charset=utf-8", (message + "\n").encode()


class HeadLimitedProtocol(HttpToolsProtocol):
    """HttpToolsProtocol with a deadline and a size limit on each request head (class
    attributes; `guarded_http` makes a subclass with the values in force)."""

    head_timeout_seconds: float = DEFAULT_HEAD_TIMEOUT_SECONDS
    max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES
    error_body: ErrorBody = staticmethod(plain_text)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_open = True
        self._head_bytes = 0
        self._parsed_bytes = 0
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Arm the head deadline: a connection that never sends a head is closed."""
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        """Disarm the deadline."""
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Parse (nothing once refused); a head still unfinished after this chunk must not have
        grown past the limit (an endless header line never reaches `on_header`)."""
        if self._refused:
            return
        super().data_received(data)
        if self._head_open and not self._refused and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head_bytes:
                self._refuse_head()

    def on_message_begin(self) -> None:
        """A new request: its head must be complete within the deadline."""
        if self._refused:
            return
        super().on_message_begin()
        self._head_open = True
        self._head_bytes = 0
        self._parsed_bytes = 0
        if self._head_timer is None:
            self._arm()

    def on_url(self, url: bytes) -> None:
        """Count the request line."""
        self._parsed_bytes += len(url)
        if not self._refused and self._parsed_bytes <= self.max_head_bytes:
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        """Count each header; past the limit, keep none."""
        self._parsed_bytes += len(name) + len(value) + 4
        if not self._refused and self._parsed_bytes <= self.max_head_bytes:
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        """The head is complete: refused if it was too large, else no deadline for the body or
        the response here."""
        if self._refused:
            return
        self._head_open = False
        self._disarm()
        if self._parsed_bytes > self.max_head_bytes:
            self._refuse_head()
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        """Nothing of a refused request reaches the app."""
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        """Nothing of a refused request reaches the app."""
        if not self._refused:
            super().on_message_complete()

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.head_timeout_seconds, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._head_open and not self.transport.is_closing():
            log.info(
                "closing connection from %s: no complete request head within %.0f s",
                _peer(self.client),
                self.head_timeout_seconds,
            )
            self.transport.close()

    def _refuse_head(self) -> None:
        self._refuse(431, f"request head larger than {self.max_head_bytes} bytes (request line and headers)")

    def _refuse(self, status: int, message: str) -> None:
        log.info("refusing request from %s: %s", _peer(self.client), message)
        content_type, body = self.error_body(status, message)
        reason = {431: b"Request Header Fields Too Large"}.get(status, b"Bad Request")
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
            % (status, reason, content_type, len(body), body)
        )
        self._head_open = False
        self._refused = True
        self._disarm()
        if self.transport.can_write_eof():
            self.transport.write_eof()  # the client reads the refusal, then the end
            self.loop.call_later(LINGER_SECONDS, self.transport.close)
        else:
            self.transport.close()


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "an unknown peer"


def guarded_http(
    head_timeout_seconds: float = DEFAULT_HEAD_TIMEOUT_SECONDS,
    max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES,
    error_body: ErrorBody = plain_text,
) -> type[HeadLimitedProtocol]:
    """A `HeadLimitedProtocol` class with these limits, for `uvicorn.Config(http=...)`.

    Args:
        head_timeout_seconds: Seconds a request head may take, from the connection opening
            (or the head's first byte, on a kept-alive connection) to its last header.
        max_head_bytes: Bytes a request head may have (request line and headers).
        error_body: How a refusal's body is written (431).

    Returns:
        The protocol class.
    """
    return type(
        "GuardedHttpToolsProtocol",
        (HeadLimitedProtocol,),
        {
            "head_timeout_seconds": head_timeout_seconds,
            "max_head_bytes": max_head_bytes,
            "error_body": staticmethod(error_body),
        },
    )
