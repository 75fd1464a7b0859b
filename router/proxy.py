"""Streaming HTTP proxy mechanics: forward one ASGI request to a worker and relay the answer.

No routing decisions here: the caller says which ``Upstream`` to use. Bodies stream both ways
(request body from ASGI ``receive`` into httpx, response body from httpx into ASGI ``send``).
Hop-by-hop headers and ``ate-target-actor`` are dropped; ``X-Forwarded-For/-Host/-Proto`` are
added. Every upstream connection is closed when its response ends (``Connection: close`` and a
pool that keeps no idle connection): a connected socket would stop gVisor from checkpointing
the actor when it is suspended between requests.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx

from router.errors import UPSTREAM_ERROR, RouteError
from router.target import TARGET_HEADER
from router.types import Upstream

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Message = dict[str, Any]

# Responses declaring at most this many bytes are relayed without watching for the client's
# disconnect (a watcher task per response costs more than finishing a small transfer).
WATCH_THRESHOLD_BYTES = 256 * 1024

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


class UpstreamClient:
    """Sends requests to workers: no keep-alive, no proxies from env, no cookies, no redirects.

    Uses httpx's transport directly (not ``httpx.AsyncClient``): the client layer would keep
    a cookie jar filled from every actor's responses and costs CPU for nothing here.

    Args:
        connect_timeout_seconds: TCP connect timeout, in seconds; reads and writes have none
            (actors may stream or long-poll).
    """

    def __init__(self, connect_timeout_seconds: float = 5.0) -> None:
        self._transport = httpx.AsyncHTTPTransport(
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=0),
        )
        self._timeout = {"connect": connect_timeout_seconds, "read": None, "write": None, "pool": None}

    async def send(self, request: httpx.Request) -> httpx.Response:
        """Send a request and return when the response headers arrived (body not read).

        Args:
            request: The request; its body may be an async iterator.

        Returns:
            The streaming response; ``aclose()`` it to release (and close) the connection.

        Raises:
            httpx.TransportError: Connecting, sending or receiving the headers failed.
        """
        request.extensions["timeout"] = self._timeout
        response = await self._transport.handle_async_request(request)
        response.request = request
        return response

    async def aclose(self) -> None:
        """Close every connection still open."""
        await self._transport.aclose()


def new_upstream_client(connect_timeout_seconds: float = 5.0) -> UpstreamClient:
    """Build the client used for workers (see ``UpstreamClient``).

    Args:
        connect_timeout_seconds: TCP connect timeout, in seconds.

    Returns:
        A client that closes every connection once its response is done.
    """
    return UpstreamClient(connect_timeout_seconds)


class UpstreamConnectError(Exception):
    """The worker could not be reached; no byte of the request was sent, so it may be retried."""


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


def response_headers(response: httpx.Response) -> list[tuple[bytes, bytes]]:
    """Headers to relay to the client: the worker's, minus hop-by-hop ones.

    Args:
        response: The worker's response (raw header bytes are kept, duplicates included).

    Returns:
        ASGI header list with lower-case names.
    """
    raw = [(k.lower(), v) for k, v in response.headers.raw]
    drop = HOP_BY_HOP | _connection_tokens(raw)
    return [(k, v) for k, v in raw if k not in drop]


def _has_body(scope: Scope) -> bool:
    for key, _value in scope["headers"]:
        if key in (b"content-length", b"transfer-encoding"):
            return True
    return False


async def open_upstream(
    client: UpstreamClient,
    scope: Scope,
    body: BodyStream,
    upstream: Upstream,
    actor: str,
) -> httpx.Response:
    """Send the request to the worker and return once its response headers arrived.

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
    url = httpx.URL(scheme="http", host=upstream.ip, port=upstream.port, raw_path=target)
    request = httpx.Request(
        scope["method"],
        url,
        headers=request_headers(scope),
        content=body if _has_body(scope) else None,
    )
    try:
        return await client.send(request)
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        if body.started:
            raise _upstream_failed(actor, upstream, exc) from exc
        raise UpstreamConnectError(f"cannot connect to {upstream}: {exc!r}") from exc
    except httpx.TransportError as exc:
        raise _upstream_failed(actor, upstream, exc) from exc


def _upstream_failed(actor: str, upstream: Upstream, exc: Exception) -> RouteError:
    detail = str(exc) or type(exc).__name__
    return RouteError(
        502,
        UPSTREAM_ERROR,
        f"actor {actor} at {upstream} failed before answering: {detail}",
    )


async def relay(response: httpx.Response, receive: Any, send: Any, body: BodyStream) -> bool:
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
    except httpx.TransportError as exc:
        log.warning("worker response broke off: %r", exc)
        return False
    finally:
        await response.aclose()


def _small(response: httpx.Response) -> bool:
    """Whether the response declares a length small enough not to watch for a disconnect."""
    length = response.headers.get("content-length", "")
    return length.isdigit() and int(length) <= WATCH_THRESHOLD_BYTES


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
