"""A real actor for the WebSocket and event-stream tests: a raw ASGI app served by uvicorn.

WebSocket paths: ``/echo`` (accepts, choosing subprotocol ``chat.v2`` when offered; echoes text
as text and bytes as bytes; ``headers`` answers the handshake's headers as JSON; ``close:<code>:
<reason>`` closes with that code and reason), ``/refuse`` (refuses with HTTP 403 and a body).
HTTP paths: ``/events?n=N`` (an event stream of N events, each sent only after the test
acknowledged the previous one through ``StreamLog.acks``; N=0: one event, then held open
until the client goes), ``/trickle`` (a plain chunked response: one chunk, then held open).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

REFUSAL = b"no websockets here\n"


@dataclass
class StreamLog:
    """What the worker saw and did."""

    offered: list[list[str]] = field(default_factory=list)
    closes: list[tuple[int, str]] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    produced: int = 0
    acks: asyncio.Queue[int] = field(default_factory=asyncio.Queue)
    held_ended: asyncio.Event = field(default_factory=asyncio.Event)


def event(i: int) -> str:
    """Event ``i`` of ``/events`` as sent (without the blank line ending it)."""
    return f"id: {i}\ndata: event {i}"


def stream_worker(log: StreamLog) -> Any:
    """The actor's ASGI app (see the module docstring)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            await _websocket(scope, receive, send, log)
        elif scope["type"] == "http":
            await _http(scope, receive, send, log)

    return app


async def _websocket(scope: dict[str, Any], receive: Any, send: Any, log: StreamLog) -> None:
    assert (await receive())["type"] == "websocket.connect"
    if scope["path"] == "/refuse":
        await send(
            {"type": "websocket.http.response.start", "status": 403, "headers": [(b"content-type", b"text/plain")]}
        )
        await send({"type": "websocket.http.response.body", "body": REFUSAL})
        return
    log.offered.append(list(scope["subprotocols"]))
    chosen = "chat.v2" if "chat.v2" in scope["subprotocols"] else None
    await send({"type": "websocket.accept", "subprotocol": chosen, "headers": [(b"set-cookie", b"ws=1")]})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            log.closes.append((message["code"], message.get("reason") or ""))
            log.closed.set()
            return
        text = message.get("text")
        if text == "headers":
            headers = [[k.decode(), v.decode()] for k, v in scope["headers"]]
            await send({"type": "websocket.send", "text": json.dumps(headers)})
        elif text is not None and text.startswith("close:"):
            _, code, reason = text.split(":", 2)
            await send({"type": "websocket.close", "code": int(code), "reason": reason})
            return
        elif text is not None:
            await send({"type": "websocket.send", "text": text})
        else:
            await send({"type": "websocket.send", "bytes": message["bytes"]})


async def _http(scope: dict[str, Any], receive: Any, send: Any, log: StreamLog) -> None:
    while (await receive()).get("more_body"):
        pass
    if scope["path"] == "/events":
        n = int(scope["query_string"].decode().removeprefix("n="))
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
            }
        )
        for i in range(1, max(n, 1) + 1):
            await send({"type": "http.response.body", "body": f"{event(i)}\n\n".encode(), "more_body": True})
            log.produced = i
            if n:
                assert await log.acks.get() == i  # the test saw event i: only now comes the next
        if n == 0:
            await _hold(receive, log)
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    if scope["path"] == "/trickle":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"first\n", "more_body": True})
        await _hold(receive, log)
        return
    await send({"type": "http.response.start", "status": 404, "headers": []})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _hold(receive: Any, log: StreamLog) -> None:
    """Keep the response open until the client (the router) goes."""
    while (await receive())["type"] != "http.disconnect":
        pass
    log.held_ended.set()
