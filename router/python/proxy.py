"""The ASGI relay: forward one ASGI HTTP request to a worker and stream the answer back.

Owns the ASGI side of proxying: reading the request body from ``receive`` (``BodyStream``),
turning the ASGI scope into the upstream request (target, framing, headers), relaying the
worker's response into ``send``, and watching for the client's disconnect during long
responses. Talking HTTP/1.1 to the worker is ``router.python.upstream_client``'s job.

No routing decisions here: the caller says which ``Upstream`` to use. Bodies stream both ways
(request body from ASGI ``receive`` to the worker socket, response body from the worker socket into
ASGI ``send``), at the same time: a worker may answer before it read the whole request body.
Hop-by-hop headers and ``ate-target-actor`` are dropped; ``X-Forwarded-For/-Host/-Proto`` are
added (an incoming ``X-Forwarded-For`` is kept only from a trusted proxy), and ``Connection: close`` (the upstream client closes every connection when its response
ends: a connected socket would stop gVisor from checkpointing the actor when it is suspended
between requests).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from ipaddress import IPv4Network, IPv6Network

import anyio

from router.core.errors import (
    CLIENT_GONE,
    ERROR,
    OK,
    TIMEOUT,
    cut_by_drain,
    response_head_timeout,
    upstream_failed,
)
from router.core.metrics import SENT_BYTES
from router.core.reach import wait_unless_gone
from router.core.upstream import Upstream
from router.python.asgi import Receive, Scope, Send
from router.python.headers import request_headers, response_headers
from router.python.request_body import BodyStream
from router.python.sessions import Sessions, StreamMarks
from router.python.upstream_client import UpstreamClient, UpstreamResponse
from router.python.upstream_errors import ClientGone, Cuttable, UpstreamBroken, UpstreamCut, UpstreamTimeout

log = logging.getLogger(__name__)

# Responses declaring at most this many bytes are relayed without watching for the client's
# disconnect (a watcher task per response costs more than finishing a small transfer).
WATCH_THRESHOLD_BYTES = 256 * 1024


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
    trusted: Sequence[IPv4Network | IPv6Network] = (),
    deadline: float | None = None,
    tag: Cuttable | None = None,
) -> UpstreamResponse:
    """Send the request to the worker and return once its response head arrived.

    Args:
        client: Client from ``new_upstream_client``.
        scope: ASGI HTTP scope of the incoming request.
        body: The incoming request body.
        upstream: Worker address of the actor.
        actor: Actor key, for error messages.
        trusted: Networks of trusted proxies (see ``request_headers``).
        deadline: ``loop.time()`` by which the whole response must be read (request timeout).
        tag: The request's drain ``Flight`` (``UpstreamClient.cut`` finds its connection by it).

    Returns:
        The streaming response; the caller must ``relay`` it (which closes it).

    Raises:
        UpstreamConnectError: The TCP connection could not be made (nothing was sent).
        ClientGone: The client went away while its body was being forwarded, or before the
            worker answered.
        RouteError: 502 when the worker failed after the connection was made; 503 when a drain
            cut the request off first; 504 when it did not start answering within the response
            head timeout (or the request timeout).
    """
    raw_path = scope.get("raw_path") or scope["path"].encode()
    query = scope.get("query_string") or b""
    target = raw_path + (b"?" + query if query else b"")
    headers = [(b"host", _host(upstream))]
    headers += [(k, v) for k, v in request_headers(scope, trusted) if k != b"content-length"]
    framing, has_body = _body_framing(scope)
    if framing is not None:
        headers.append(framing)
    method = scope["method"].encode()
    try:
        opening = client.open(upstream, method, target, headers, body if has_body else None, deadline, tag)
        if has_body:  # the body's reader sees the client leave
            return await opening
        # Nothing of the client's is read meanwhile: watch it, so that a client that leaves
        # before the answer gets its worker connection reset at once (not when the worker answers).
        return await wait_unless_gone(
            opening, body.wait_disconnect(), lambda: ClientGone("client left before the worker answered")
        )
    except UpstreamTimeout as exc:
        raise response_head_timeout(actor, upstream, exc.what) from exc
    except UpstreamCut as exc:
        raise cut_by_drain(actor) from exc
    except UpstreamBroken as exc:
        raise upstream_failed(actor, upstream, str(exc) or type(exc).__name__) from exc


async def relay(
    response: UpstreamResponse,
    receive: Receive,
    send: Send,
    body: BodyStream,
    sessions: Sessions | None = None,
    actor: str = "",
    stream: StreamMarks | None = None,
) -> str:
    """Stream the worker's response to the client, then close the upstream connection.

    A long response (no Content-Length, or more than ``WATCH_THRESHOLD_BYTES``) is streamed
    while watching for the client's disconnect (when the request body was fully read), which
    stops the transfer and closes the worker connection early. Every chunk is sent on as it
    arrives (an event stream reaches the client event by event).

    An event stream (``text/event-stream``) so watched is also a session in ``sessions``: when
    the router ends it (shutdown, drain), its body is ended cleanly at once; the client's
    EventSource then reconnects (a partial last event is dropped by it, as the format says).

    Args:
        response: From ``open_upstream``.
        receive: ASGI receive callable.
        send: ASGI send callable.
        body: The request body stream (tells whether ``receive`` is free to watch).
        sessions: Where to register an event stream (None: not registered).
        actor: Key of the actor, for ``sessions``.
        stream: Marks an event stream's flight as a stream and its bytes as activity
            (router.core.activity), or None.

    Returns:
        The outcome: ``ok`` when the response was relayed completely; ``error`` when the
        worker failed mid-way, ``timeout`` when it was silent too long or the request timeout
        ran out, ``client_gone`` when the client left. Short of ``ok`` the client connection is
        left incomplete, so the client sees a truncated response rather than a wrong complete one.
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
            return OK
        SENT_BYTES.inc(len(first))
        await send({"type": "http.response.body", "body": first, "more_body": True})
        if _small(response) or (body.started and not body.done):
            await _relay_rest(chunks, send)
            return OK
        if sessions is None or not _is_event_stream(response):
            return OK if await _relay_watched(chunks, receive, send) else CLIENT_GONE
        moved = stream.opened() if stream is not None else None
        with sessions.open(actor) as session:
            return OK if await _relay_watched(chunks, receive, send, session.ended, moved) else CLIENT_GONE
    except UpstreamTimeout as exc:
        log.warning("worker response cut off: no %s", exc.what)
        return TIMEOUT
    except UpstreamBroken as exc:
        log.warning("worker response broke off: %s", exc)
        return ERROR
    except ClientGone:
        log.info("client left while sending its body; upstream connection closed")
        return CLIENT_GONE
    finally:
        await response.aclose()


def _small(response: UpstreamResponse) -> bool:
    """Whether the response declares a length small enough not to watch for a disconnect."""
    for key, value in response.headers:
        if key == b"content-length":
            return value.isdigit() and int(value) <= WATCH_THRESHOLD_BYTES
    return False


def _is_event_stream(response: UpstreamResponse) -> bool:
    for key, value in response.headers:
        if key == b"content-type":
            return value.split(b";")[0].strip().lower() == b"text/event-stream"
    return False


async def _relay_rest(chunks: AsyncIterator[bytes], send: Send, moved: Callable[[], None] | None = None) -> bool:
    async for chunk in chunks:
        if moved is not None:
            moved()
        SENT_BYTES.inc(len(chunk))
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    return True


async def _relay_watched(
    chunks: AsyncIterator[bytes],
    receive: Receive,
    send: Send,
    ended: asyncio.Event | None = None,
    moved: Callable[[], None] | None = None,
) -> bool:
    """Relay until the end, the client's disconnect, or ``ended`` (then end the body cleanly)."""
    finished = stopped = False

    async def watch(scope: anyio.CancelScope) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
        if not finished:
            scope.cancel()

    async def stop(scope: anyio.CancelScope, ended: asyncio.Event) -> None:
        nonlocal stopped
        await ended.wait()
        if not finished:
            stopped = True
            scope.cancel()

    failure: UpstreamBroken | ClientGone | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(watch, group.cancel_scope)
        if ended is not None:
            group.start_soon(stop, group.cancel_scope, ended)
        try:
            finished = await _relay_rest(chunks, send, moved)
        except (UpstreamBroken, ClientGone) as exc:  # raised as itself, not in an exception group
            failure = exc
        group.cancel_scope.cancel()
    if failure is not None:
        raise failure
    if stopped and not finished:
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        log.info("event stream ended by the router; upstream connection closed")
        return True
    if not finished:
        log.info("client left during the response; upstream connection closed")
    return finished
