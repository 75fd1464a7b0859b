"""Streaming HTTP proxy mechanics: forward one ASGI request to a worker and relay the answer.

No routing decisions here: the caller says which ``Upstream`` to use. Bodies stream both ways
(request body from ASGI ``receive`` to the worker socket, response body from the worker socket into
ASGI ``send``), at the same time: a worker may answer before it read the whole request body.
Hop-by-hop headers and ``ate-target-actor`` are dropped; ``X-Forwarded-For/-Host/-Proto`` are
added. Every upstream connection is closed when its response ends (``Connection: close`` and a
pool that keeps no idle connection): a connected socket would stop gVisor from checkpointing
the actor when it is suspended between requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

import anyio
import h11

from router.errors import UPSTREAM_ERROR, RouteError
from router.target import TARGET_HEADER
from router.types import Upstream

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Message = dict[str, Any]

# Responses declaring at most this many bytes are relayed without watching for the client's
# disconnect (a watcher task per response costs more than finishing a small transfer).
WATCH_THRESHOLD_BYTES = 256 * 1024

# Bytes asked of the worker socket per read.
READ_SIZE = 256 * 1024

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
_DROP_REQUEST = HOP_BY_HOP | {
    TARGET_HEADER.encode(),
    b"host",
    b"expect",
    b"x-forwarded-for",
    b"x-forwarded-host",
    b"x-forwarded-proto",
}


class ClientGone(Exception):
    """The client disconnected while its request body was being read."""


class BodyStream:
    """The request body, read lazily from ASGI ``receive``.

    Attributes:
        started: Whether any of the body was read (a retry is no longer possible).
        done: Whether the body was read to its end.
    """

    def __init__(self, receive: Any) -> None:
        self._receive = receive
        self.started = False
        self.done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        """Yield body chunks as they arrive.

        Raises:
            ClientGone: The client disconnected before the body ended.
        """
        self.started = True
        while not self.done:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                raise ClientGone("client disconnected while sending the request body")
            self.done = not message.get("more_body", False)
            chunk = message.get("body", b"")
            if chunk:
                yield chunk


class UpstreamBroken(Exception):
    """The worker's connection failed or it broke HTTP/1.1 after the connection was made."""


class UpstreamConnectError(Exception):
    """The worker could not be reached; no byte of the request was sent, so it may be retried."""


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

    def __init__(self, sock: socket.socket, owner: UpstreamClient) -> None:
        self.sock = sock
        self.owner = owner
        self.h11 = h11.Connection(h11.CLIENT)
        self.loop = asyncio.get_running_loop()
        self.sender: asyncio.Task[None] | None = None
        self.client_gone = False
        self.closed = False

    async def send_head(self, request: h11.Request) -> None:
        """Send the request line and headers."""
        await self.loop.sock_sendall(self.sock, self.h11.send(request) or b"")

    async def send_body(self, body: BodyStream) -> None:
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
                try:
                    data = await self.loop.sock_recv(self.sock, READ_SIZE)
                except OSError as exc:
                    raise UpstreamBroken(f"{type(exc).__name__}: {exc}") from exc
                if self.client_gone:
                    raise ClientGone("client disconnected while sending the request body")
                self.h11.receive_data(data)
        except h11.RemoteProtocolError as exc:
            raise UpstreamBroken(f"bad HTTP from worker: {exc}") from exc

    async def read_head(self) -> UpstreamResponse:
        """Wait for the final response head (1xx answers are skipped)."""
        while True:
            event = await self.next_event()
            if isinstance(event, h11.Response):
                headers = [(bytes(k), bytes(v)) for k, v in event.headers]
                return UpstreamResponse(self, event.status_code, headers)
            if isinstance(event, h11.ConnectionClosed):
                raise UpstreamBroken("connection closed before a response")

    async def aclose(self) -> None:
        """Stop the request body (if still sending) and close the socket."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.sender is not None:
                await _finish(self.sender)  # a late ClientGone is of no interest any more
        finally:
            self.owner._live.discard(self)
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
        connect_timeout_seconds: TCP connect timeout, in seconds; reads and writes have none
            (actors may stream or long-poll).
    """

    def __init__(self, connect_timeout_seconds: float = 5.0) -> None:
        self.connect_timeout_seconds = connect_timeout_seconds
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
        body: BodyStream | None,
    ) -> UpstreamResponse:
        """Send a request and return when the response head arrived (body not read).

        Args:
            upstream: Worker address.
            method: HTTP method.
            target: Request target (raw path and query).
            headers: Headers to send, ``Host`` included; with a body, ``Content-Length`` or
                ``Transfer-Encoding: chunked`` must be among them.
            body: The request body, or None.

        Returns:
            The response; ``aclose()`` it to stop the body and close the connection.

        Raises:
            UpstreamConnectError: The connection could not be made (nothing was sent).
            UpstreamBroken: The worker failed before sending a response head.
            ClientGone: The client left while its body was being forwarded.
        """
        try:
            sock = await self._connect(upstream)
        except (OSError, TimeoutError) as exc:
            raise UpstreamConnectError(f"cannot connect to {upstream}: {exc!r}") from exc
        conn = _Connection(sock, self)
        self._live.add(conn)
        try:
            try:
                await conn.send_head(h11.Request(method=method, target=target, headers=headers))
            except OSError:
                pass  # the worker may still answer; read_head tells
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

    async def aclose(self) -> None:
        """Close every connection still open."""
        for conn in list(self._live):
            await conn.aclose()


def new_upstream_client(connect_timeout_seconds: float = 5.0) -> UpstreamClient:
    """Build the client used for workers (see ``UpstreamClient``).

    Args:
        connect_timeout_seconds: TCP connect timeout, in seconds.

    Returns:
        A client that closes every connection once its response is done.
    """
    return UpstreamClient(connect_timeout_seconds)


def _connection_tokens(headers: list[tuple[bytes, bytes]]) -> set[bytes]:
    tokens: set[bytes] = set()
    for key, value in headers:
        if key.lower() == b"connection":
            tokens.update(t.strip().lower() for t in value.split(b",") if t.strip())
    return tokens


def request_headers(scope: Scope) -> list[tuple[bytes, bytes]]:
    """Headers to send upstream for an ASGI HTTP request.

    Args:
        scope: ASGI HTTP scope (lower-case header names).

    Returns:
        The client's headers without hop-by-hop ones (including those named by
        ``Connection``), ``ate-target-actor``, ``Host`` and ``Expect``; plus
        ``X-Forwarded-For`` (appended to any incoming one), ``X-Forwarded-Host``,
        ``X-Forwarded-Proto`` and ``Connection: close``.
    """
    raw: list[tuple[bytes, bytes]] = scope["headers"]
    drop = _DROP_REQUEST | _connection_tokens(raw)
    out: list[tuple[bytes, bytes]] = []
    host = b""
    forwarded_for: list[bytes] = []
    for key, value in raw:
        if key == b"host":
            host = value
        elif key == b"x-forwarded-for":
            forwarded_for.append(value)
        if key not in drop:
            out.append((key, value))
    client = scope.get("client")
    if client:
        forwarded_for.append(str(client[0]).encode())
    if forwarded_for:
        out.append((b"x-forwarded-for", b", ".join(forwarded_for)))
    if host:
        out.append((b"x-forwarded-host", host))
    out.append((b"x-forwarded-proto", str(scope.get("scheme", "http")).encode()))
    out.append((b"connection", b"close"))
    return out


def response_headers(response: UpstreamResponse) -> list[tuple[bytes, bytes]]:
    """Headers to relay to the client: the worker's, minus hop-by-hop ones.

    Args:
        response: The worker's response (raw header bytes are kept, duplicates included).

    Returns:
        ASGI header list with lower-case names.
    """
    raw = response.headers
    drop = HOP_BY_HOP | _connection_tokens(raw)
    return [(k, v) for k, v in raw if k not in drop]


def _body_framing(scope: Scope) -> tuple[tuple[bytes, bytes] | None, bool]:
    """The framing header of the upstream request, and whether a body follows."""
    chunked = False
    for key, value in scope["headers"]:
        if key == b"content-length":
            return (b"content-length", value), value.strip() != b"0"
        if key == b"transfer-encoding":
            chunked = True
    return ((b"transfer-encoding", b"chunked"), True) if chunked else (None, False)


def _host(upstream: Upstream) -> bytes:
    text = str(upstream)
    return text.encode() if upstream.port != 80 else text.rsplit(":", 1)[0].encode()


async def open_upstream(
    client: UpstreamClient,
    scope: Scope,
    body: BodyStream,
    upstream: Upstream,
    actor: str,
) -> UpstreamResponse:
    """Send the request to the worker and return once its response head arrived.

    Args:
        client: Client from ``new_upstream_client``.
        scope: ASGI HTTP scope of the incoming request.
        body: The incoming request body.
        upstream: Worker address of the actor.
        actor: Actor key, for error messages.

    Returns:
        The streaming response; the caller must ``relay`` it (which closes it).

    Raises:
        UpstreamConnectError: The TCP connection could not be made (nothing was sent).
        ClientGone: The client went away while its body was being forwarded.
        RouteError: 502 when the worker failed after the connection was made.
    """
    raw_path = scope.get("raw_path") or scope["path"].encode()
    query = scope.get("query_string") or b""
    target = raw_path + (b"?" + query if query else b"")
    headers = [(b"host", _host(upstream))]
    headers += [(k, v) for k, v in request_headers(scope) if k != b"content-length"]
    framing, has_body = _body_framing(scope)
    if framing is not None:
        headers.append(framing)
    method = scope["method"].encode()
    try:
        return await client.open(upstream, method, target, headers, body if has_body else None)
    except UpstreamBroken as exc:
        raise _upstream_failed(actor, upstream, exc) from exc
    except h11.LocalProtocolError as exc:
        raise _upstream_failed(actor, upstream, exc) from exc


def _upstream_failed(actor: str, upstream: Upstream, exc: Exception) -> RouteError:
    detail = str(exc) or type(exc).__name__
    return RouteError(
        502,
        UPSTREAM_ERROR,
        f"actor {actor} at {upstream} failed before answering: {detail}",
    )


async def relay(response: UpstreamResponse, receive: Any, send: Any, body: BodyStream) -> bool:
    """Stream the worker's response to the client, then close the upstream connection.

    A long response (no Content-Length, or more than ``WATCH_THRESHOLD_BYTES``) is streamed
    while watching for the client's disconnect (when the request body was fully read), which
    stops the transfer and closes the worker connection early.

    Args:
        response: From ``open_upstream``.
        receive: ASGI receive callable.
        send: ASGI send callable.
        body: The request body stream (tells whether ``receive`` is free to watch).

    Returns:
        True when the response was relayed completely; False when the worker failed mid-way or
        the client left (the client connection is then left incomplete, so the client sees a
        truncated response rather than a wrong complete one).
    """
    try:
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": response_headers(response),
            }
        )
        chunks = response.aiter_raw()
        try:
            first = await chunks.__anext__()
        except StopAsyncIteration:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return True
        await send({"type": "http.response.body", "body": first, "more_body": True})
        if _small(response) or (body.started and not body.done):
            return await _relay_rest(chunks, send)
        return await _relay_watched(chunks, receive, send)
    except UpstreamBroken as exc:
        log.warning("worker response broke off: %s", exc)
        return False
    except ClientGone:
        log.info("client left while sending its body; upstream connection closed")
        return False
    finally:
        await response.aclose()


def _small(response: UpstreamResponse) -> bool:
    """Whether the response declares a length small enough not to watch for a disconnect."""
    for key, value in response.headers:
        if key == b"content-length":
            return value.isdigit() and int(value) <= WATCH_THRESHOLD_BYTES
    return False


async def _relay_rest(chunks: AsyncIterator[bytes], send: Any) -> bool:
    async for chunk in chunks:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    return True


async def _relay_watched(chunks: AsyncIterator[bytes], receive: Any, send: Any) -> bool:
    finished = False

    async def watch(scope: anyio.CancelScope) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
        if not finished:
            scope.cancel()

    async with anyio.create_task_group() as group:
        group.start_soon(watch, group.cancel_scope)
        finished = await _relay_rest(chunks, send)
        group.cancel_scope.cancel()
    if not finished:
        log.info("client left during the response; upstream connection closed")
    return finished
