"""HTTP/1.1 client to workers: one request per new connection, full duplex, closed at the end.

Owns the wire: the TCP connect (with its timeout), h11 framing, streaming the request body
while the response is read, and closing the socket. It knows nothing of ASGI or of actors; the
caller gives it an ``Upstream``, a request head and a body iterable. Every connection is closed
when its response ends (no pool, no keep-alive): a connected socket would stop gVisor from
checkpointing the actor when it is suspended between requests.

Failures: ``UpstreamConnectError`` (nothing was sent, so a retry elsewhere is safe),
``UpstreamBroken`` (the worker failed or broke HTTP/1.1 after the connection was made, or h11
refused the request head; ``UpstreamCut`` when a drain cut it off) and ``ClientGone`` (the request
body's source went away). A connection whose exchange did not end is closed with a reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import struct
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import h11

from router.core.upstream import MISSING_END, Upstream, missing_head
from router.python.upstream_errors import (
    ClientGone,
    Cuttable,
    UpstreamBroken,
    UpstreamConnectError,
    UpstreamCut,
    UpstreamTimeout,
)

log = logging.getLogger(__name__)

# Bytes asked of the worker socket per read.
READ_SIZE = 256 * 1024

ENDED = frozenset({h11.DONE, h11.MUST_CLOSE, h11.CLOSED})
"""The worker's h11 states once its response is complete: its connection is closed normally."""

RESET_ON_CLOSE = struct.pack("ii", 1, 0)
"""SO_LINGER on with a zero timeout: ``close`` sends a reset instead of a FIN."""


class UpstreamResponse:
    """A worker's response whose head has arrived; the body is read by ``aiter_raw``.

    The request body may still be streaming to the worker (full duplex, e.g. an echo); it
    stops as soon as the worker stops reading it, without losing the worker's answer.

    Attributes:
        status_code: The worker's HTTP status.
        headers: The worker's headers, names lower-cased, order and duplicates kept.
    """

    def __init__(self, conn: _Connection, status_code: int, headers: list[tuple[bytes, bytes]]):
        self._conn = conn
        self.status_code = status_code
        self.headers = headers

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """Yield the response body as it arrives (chunked framing removed).

        Raises:
            UpstreamBroken: The worker failed or closed before the body ended.
            ClientGone: The client left before its request body ended.
        """
        conn = self._conn
        while True:
            event = await conn.next_event()
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return

    async def aclose(self) -> None:
        """Stop sending the request body and close the worker connection."""
        await self._conn.aclose()


class _Connection:
    """One HTTP/1.1 exchange with a worker over a raw non-blocking socket.

    Reading and writing are independent: a write failure (the worker stopped reading and
    closed) never discards what the worker already sent; the socket is closed only by
    ``aclose``. (httpcore pauses reading while it writes the body and closes the socket on a
    write error, which loses a worker's early answer.)
    """

    def __init__(
        self, sock: socket.socket, owner: UpstreamClient, deadline: float | None = None, tag: Cuttable | None = None
    ) -> None:
        self.sock = sock
        self.owner = owner
        self.tag = tag
        self.deadline = deadline
        self.head_deadline: float | None = None
        self.h11 = h11.Connection(h11.CLIENT)
        self.loop = asyncio.get_running_loop()
        self.sender: asyncio.Task[None] | None = None
        self.client_gone = False
        self.closed = False

    async def send_head(self, request: h11.Request) -> None:
        """Send the request line and headers."""
        await self.loop.sock_sendall(self.sock, self.h11.send(request) or b"")

    async def send_body(self, body: AsyncIterable[bytes]) -> None:
        """Stream the request body; stop quietly when the worker stops reading it.

        Raises:
            ClientGone: The client left before its body ended.
        """
        try:
            async for chunk in body:
                await self.loop.sock_sendall(self.sock, self.h11.send(h11.Data(data=chunk)) or b"")
            await self.loop.sock_sendall(self.sock, self.h11.send(h11.EndOfMessage()) or b"")
        except (OSError, h11.LocalProtocolError) as exc:
            # The worker answered (or failed) without reading the whole body; its answer, if
            # any, is still readable.
            log.debug("request body to worker stopped: %r", exc)
        except ClientGone:
            # Wake up the reader (a worker waiting for the rest of the body would never answer).
            self.client_gone = True
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
            raise

    async def next_event(self) -> Any:
        """The worker's next HTTP event, reading from the socket as needed.

        Raises:
            UpstreamBroken: Transport failure or HTTP protocol violation.
            ClientGone: The client left before its request body ended.
        """
        try:
            while True:
                event = self.h11.next_event()
                if event is not h11.NEED_DATA:
                    return event
                timeout, what = self._read_timeout()
                try:
                    data = await asyncio.wait_for(self.loop.sock_recv(self.sock, READ_SIZE), timeout)
                except TimeoutError:
                    raise UpstreamTimeout(what) from None
                except OSError as exc:
                    if self._cut():
                        raise UpstreamCut() from exc
                    raise UpstreamBroken(f"{type(exc).__name__}: {exc}") from exc
                if self.client_gone:
                    raise ClientGone("client disconnected while sending the request body")
                if not data and self._cut():  # the end the drain made, not the worker's
                    raise UpstreamCut()
                self.h11.receive_data(data)
        except h11.RemoteProtocolError as exc:
            if self._cut():
                raise UpstreamCut() from exc
            raise UpstreamBroken(f"bad HTTP from worker: {exc}") from exc

    def _cut(self) -> bool:
        """Whether a drain cut this exchange off."""
        return self.tag is not None and self.tag.cut

    def _read_timeout(self) -> tuple[float, str]:
        """Seconds the next read may wait, and what is missing when it runs out: the nearest of
        the response head's deadline (until the head came; the idle timeout after) and the
        request's deadline."""
        owner = self.owner
        now = self.loop.time()
        if self.head_deadline is not None:  # a worker may think (or read the body) before it answers
            choices = [(self.head_deadline - now, missing_head(owner.response_head_timeout_seconds))]
        else:
            idle = owner.idle_timeout_seconds
            choices = [(idle, f"byte from the worker for {idle:g}s (idle timeout)")]
        if self.deadline is not None:
            choices.append((self.deadline - now, MISSING_END))
        timeout, what = min(choices)
        return max(timeout, 0.0), what

    async def read_head(self) -> UpstreamResponse:
        """Wait for the final response head (1xx answers are skipped), at most the client's
        response head timeout."""
        self.head_deadline = self.loop.time() + self.owner.response_head_timeout_seconds
        while True:
            event = await self.next_event()
            if isinstance(event, h11.Response):
                self.head_deadline = None
                headers = [(bytes(k), bytes(v)) for k, v in event.headers]
                return UpstreamResponse(self, event.status_code, headers)
            if isinstance(event, h11.ConnectionClosed):
                raise UpstreamBroken("connection closed before a response")

    def shut(self) -> None:
        """Cut the exchange off (a drain): the reader sees an end at once (``UpstreamCut``) and
        ``aclose``, which follows, resets the connection. Nothing is sent before that reset (no
        FIN: see ``aclose``)."""
        with contextlib.suppress(OSError):
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET_ON_CLOSE)
            self.sock.shutdown(socket.SHUT_RD)

    async def aclose(self) -> None:
        """Stop the request body (if still sending) and close the socket: with a reset when the
        exchange did not end (cut by a drain, the client gone, a timeout, a failure).

        A closed connection whose request the workload is still working on stays half-open in
        the sandbox; a gVisor snapshot taken then restores to a sandbox whose listener answers
        no connection (runsc 20240729: 3 of 3 FULL restores after such a FIN, none after a
        reset; tests/atelet/test_checkpoint_after_cut.py), and the suspend of an actor follows
        its drain's cuts within milliseconds. A reset ends the connection in the sandbox at once.
        """
        if self.closed:
            return
        self.closed = True
        try:
            if self.sender is not None:
                await _finish(self.sender)  # a late ClientGone is of no interest any more
        finally:
            self.owner._live.discard(self)
            if self.h11.their_state not in ENDED:
                with contextlib.suppress(OSError):
                    self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET_ON_CLOSE)
            self.sock.close()


async def _finish(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` if still running, wait for it and retrieve its outcome (never raises
    the task's exception; a cancellation of the caller still propagates)."""
    if not task.done():
        task.cancel()
        await asyncio.wait([task])
    if not task.cancelled():
        task.exception()


class UpstreamClient:
    """Sends requests to workers over HTTP/1.1: one new connection per request, closed when
    the response ends; no proxies from env, no cookies, no redirects.

    The request body streams while the response is read (full duplex): a worker that answers
    before reading the whole body (e.g. 413) has its answer relayed, the rest of the body is
    not sent.

    Args:
        connect_timeout_seconds: TCP connect timeout, in seconds.
        response_head_timeout_seconds: From the request head sent to the response head
            received, in seconds.
        idle_timeout_seconds: Longest silence of the worker while its answer is awaited or
            streamed, in seconds (a stream or long poll that sends nothing for longer is cut).
    """

    def __init__(
        self,
        connect_timeout_seconds: float = 5.0,
        response_head_timeout_seconds: float = 120.0,
        idle_timeout_seconds: float = 300.0,
    ) -> None:
        self.connect_timeout_seconds = connect_timeout_seconds
        self.response_head_timeout_seconds = response_head_timeout_seconds
        self.idle_timeout_seconds = idle_timeout_seconds
        self._live: set[_Connection] = set()

    async def _connect(self, upstream: Upstream) -> socket.socket:
        loop = asyncio.get_running_loop()
        try:
            family = socket.AF_INET6 if ipaddress.ip_address(upstream.ip).version == 6 else socket.AF_INET
            address: Any = (upstream.ip, upstream.port)
        except ValueError:  # a host name: resolve it
            infos = await loop.getaddrinfo(upstream.ip, upstream.port, type=socket.SOCK_STREAM)
            family, address = infos[0][0], infos[0][4]
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await asyncio.wait_for(loop.sock_connect(sock, address), self.connect_timeout_seconds)
        except BaseException:
            sock.close()
            raise
        return sock

    async def open(
        self,
        upstream: Upstream,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: AsyncIterable[bytes] | None,
        deadline: float | None = None,
        tag: Cuttable | None = None,
    ) -> UpstreamResponse:
        """Send a request and return when the response head arrived (body not read).

        Args:
            upstream: Worker address.
            method: HTTP method.
            target: Request target (raw path and query).
            headers: Headers to send, ``Host`` included; with a body, ``Content-Length`` or
                ``Transfer-Encoding: chunked`` must be among them.
            body: The request body, or None; it may raise ``ClientGone`` to abort.
            deadline: ``loop.time()`` by which the whole response must have been read (the
                request timeout), or None.
            tag: What ``cut`` finds the connection by; one whose ``cut`` is set when the
                connection is made is closed at once (``UpstreamBroken``).

        Returns:
            The response; ``aclose()`` it to stop the body and close the connection.

        Raises:
            UpstreamConnectError: The connection could not be made (nothing was sent).
            UpstreamBroken: The worker failed before sending a response head, or h11 refused
                to send the request head (e.g. an illegal header value).
            UpstreamTimeout: The response head did not come in time.
            ClientGone: The client left while its body was being forwarded.
        """
        try:
            sock = await self._connect(upstream)
        except (OSError, TimeoutError) as exc:
            raise UpstreamConnectError(f"cannot connect to {upstream}: {exc!r}") from exc
        conn = _Connection(sock, self, deadline, tag)
        self._live.add(conn)
        try:
            if tag is not None and tag.cut:
                raise UpstreamCut()
            try:
                await conn.send_head(h11.Request(method=method, target=target, headers=headers))
            except OSError:
                pass  # the worker may still answer; read_head tells
            except h11.LocalProtocolError as exc:
                # The only place it escapes: send_body swallows it, next_event turns it remote.
                raise UpstreamBroken(str(exc) or type(exc).__name__) from exc
            if body is None:
                return await conn.read_head()
            conn.sender = asyncio.create_task(conn.send_body(body))
            head = asyncio.create_task(conn.read_head())
            try:
                await asyncio.wait({head, conn.sender}, return_when=asyncio.FIRST_COMPLETED)
                if not head.done():  # the sender ended first: raise its ClientGone, if any
                    failure = conn.sender.exception()
                    if failure is not None:
                        raise failure
                return await head
            finally:
                await _finish(head)
        except BaseException:
            await conn.aclose()
            raise

    def cut(self, tag: Cuttable) -> int:
        """Shut down the connections tagged ``tag`` (their responses break off); return how many."""
        found = [conn for conn in self._live if conn.tag is tag]
        for conn in found:
            conn.shut()
        return len(found)

    async def aclose(self) -> None:
        """Close every connection still open."""
        for conn in list(self._live):
            await conn.aclose()


def new_upstream_client(
    connect_timeout_seconds: float = 5.0,
    response_head_timeout_seconds: float = 120.0,
    idle_timeout_seconds: float = 300.0,
) -> UpstreamClient:
    """Build the client used for workers (see ``UpstreamClient`` for the timeouts, in seconds).

    Returns:
        A client that closes every connection once its response is done.
    """
    return UpstreamClient(connect_timeout_seconds, response_head_timeout_seconds, idle_timeout_seconds)
