"""The worker's HTTP/1.1 client on its own: any body iterable, and no ASGI or routing imports."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import router.python.upstream_client
import router.python.upstream_errors
from router.core.upstream import Upstream
from router.python.upstream_client import new_upstream_client


def test_the_client_imports_nothing_of_asgi_or_routing() -> None:
    # The seam: proxy.py relays ASGI on top of this module, never the other way round. (Its
    # failures live in upstream_errors.py, which imports nothing of ours.)
    for module, allowed in (
        (router.python.upstream_client, {"router.core.upstream", "router.python.upstream_errors"}),
        (router.python.upstream_errors, set()),
    ):
        tree = ast.parse(Path(module.__file__ or "").read_text())
        imported = {
            name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for name in ([node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names])
        }
        assert {m for m in imported if m.startswith("router")} <= allowed
        assert not imported & {"anyio", "starlette", "uvicorn", "httpx"}


@pytest.mark.asyncio
async def test_a_plain_async_generator_is_a_body() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = await reader.readexactly(5)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n" + body[::-1])
        await writer.drain()
        writer.close()

    async def body() -> AsyncIterator[bytes]:
        yield b"he"
        yield b"llo"

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    upstream = Upstream("127.0.0.1", server.sockets[0].getsockname()[1])
    client = new_upstream_client()
    try:
        headers = [(b"host", str(upstream).encode()), (b"content-length", b"5")]
        response = await client.open(upstream, b"POST", b"/", headers, body())
        try:
            assert response.status_code == 200
            assert b"".join([chunk async for chunk in response.aiter_raw()]) == b"olleh"
        finally:
            await response.aclose()
    finally:
        await client.aclose()
        server.close()
