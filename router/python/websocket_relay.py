"""The relay of an open WebSocket's messages between the client (ASGI) and the worker (the
``websockets`` client), and its close: whoever closes first has its code and reason passed to
the other side; when the router ends the session (a drain, a stop) both sides get 1001 with the
session's reason. Split from router.python.websocket, which routes and opens the WebSocket."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import EXTERNAL_CLOSE_CODES

from router.python.asgi import Receive, Send
from router.python.sessions import GOING_AWAY, Session

NORMAL = 1000
NO_STATUS = 1005  # received without a code; cannot be sent on
ABNORMAL = 1006  # the connection dropped without a close frame; cannot be sent on
BAD_GATEWAY = 1014  # a gateway's upstream failed (RFC 6455 registry)


async def relay_messages(
    worker: ClientConnection, receive: Receive, send: Send, session: Session, moved: Callable[[], None] = lambda: None
) -> bool:
    """Relay messages both ways until one side closes or the router ends the session; then
    close the other side with the same code and reason (1001 to both when the router ends it).

    Returns:
        False when the worker's connection broke off without a close frame.
    """
    upward = asyncio.create_task(_client_to_worker(worker, receive, moved))
    downward = asyncio.create_task(_worker_to_client(worker, send, moved))
    ended = asyncio.create_task(session.ended.wait())
    try:
        await asyncio.wait({upward, downward, ended}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (upward, downward, ended):
            task.cancel()
        await asyncio.gather(upward, downward, ended, return_exceptions=True)
    if session.ended.is_set():
        reason = close_reason(session.reason)
        await asyncio.gather(
            close_client(send, GOING_AWAY, reason), worker.close(GOING_AWAY, reason), return_exceptions=True
        )
        return True
    closed_by_client = _result(upward)
    if closed_by_client is not None:
        code, reason = closed_by_client
        if code in (NO_STATUS, ABNORMAL):
            code, reason = (NORMAL, "") if code == NO_STATUS else (GOING_AWAY, "the client went away")
        await worker.close(code, reason)
        return True
    if downward.done() and not downward.cancelled() and downward.exception() is not None:
        await worker.close(GOING_AWAY, "the client went away")  # sending to the client failed
        return True
    await worker.wait_closed()  # the worker closed (or broke off): tell the client the same
    received = worker.protocol.close_rcvd
    if received is None:
        await close_client(send, BAD_GATEWAY, "the connection to the actor broke off")
        return False
    code, reason = received.code, received.reason
    if not _sendable(code):
        code, reason = NORMAL, ""
    await close_client(send, code, reason)
    return True


def _result(task: asyncio.Task[tuple[int, str] | None]) -> tuple[int, str] | None:
    """The task's result when it finished by itself without an exception, else None."""
    if task.done() and not task.cancelled() and task.exception() is None:
        return task.result()
    return None


async def _client_to_worker(
    worker: ClientConnection, receive: Receive, moved: Callable[[], None]
) -> tuple[int, str] | None:
    """Relay the client's messages; returns its close (code, reason), or None when the worker
    closed first."""
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return int(message.get("code", NORMAL)), str(message.get("reason") or "")
        if message["type"] != "websocket.receive":
            continue
        moved()
        text = message.get("text")
        try:
            await worker.send(text if text is not None else (message.get("bytes") or b""))
        except ConnectionClosed:
            return None


async def _worker_to_client(worker: ClientConnection, send: Send, moved: Callable[[], None]) -> None:
    """Relay the worker's messages until it closes (the client leaving shows on receive)."""
    while True:
        try:
            message = await worker.recv()
        except ConnectionClosed:
            return
        moved()
        if isinstance(message, str):
            await send({"type": "websocket.send", "text": message})
        else:
            await send({"type": "websocket.send", "bytes": message})


async def close_client(send: Send, code: int, reason: str) -> None:
    """Close the client's side with ``code`` and ``reason`` (nothing when it is gone already)."""
    with contextlib.suppress(OSError, RuntimeError):  # the client is gone, or already closed
        await send({"type": "websocket.close", "code": code, "reason": reason})


def _sendable(code: int) -> bool:
    """Whether a close code may be put in a close frame (RFC 6455 7.4; 3000-4999 registered/private)."""
    return code in EXTERNAL_CLOSE_CODES or 3000 <= code < 5000


def close_reason(text: str) -> str:
    """A close reason: one line, at most 123 bytes of UTF-8 (what a close frame holds)."""
    data = " ".join(text.split()).encode()[:123]
    return data.decode(errors="ignore")
