"""Slow and oversized request heads against a real `python -m router` process.

The router runs with `--head-timeout 2` and an api-server address where nothing listens, so a
complete request is answered at once (400 without a target; nothing is proxied). Clients that
open a connection and send nothing, or send a head a byte at a time (slowloris), do not keep a
normal request from being served, and the server closes each of them (asserted as an
end-of-stream the client reads, not by timing). A head larger than the limit gets 431.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.router.router_harness import free_port

ROOT = Path(__file__).resolve().parents[2]
SLOW_CLIENTS = 40


@pytest.fixture(scope="module")
def router_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A router process with a 2 s request-head timeout (its log in a file)."""
    log = (tmp_path_factory.mktemp("router") / "router.log").open("w")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ATE_DATABASE_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "router", "--listen", f"127.0.0.1:{port}",
         "--metrics-listen", f"127.0.0.1:{free_port()}", "--api-server", f"http://127.0.0.1:{free_port()}",
         "--head-timeout", "2"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=log, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"router: ready on 127.0.0.1:{port}"
        yield port
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


async def silent(port: int) -> bytes:
    """Open a connection, send nothing; what the server sends before it closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        return await asyncio.wait_for(reader.read(), 60)
    finally:
        writer.close()


async def trickling(port: int) -> bytes:
    """Send a head a byte every 50 ms (it would take a minute); what the server sends before
    it closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = b"GET / HTTP/1.1\r\nhost: c1.demo.actors.ate.local\r\nx-slow: " + b"s" * 1200 + b"\r\n\r\n"
    closed = asyncio.create_task(reader.read())
    try:
        for byte in head:
            if closed.done():
                break
            try:
                writer.write(bytes([byte]))
                await writer.drain()
            except ConnectionError:
                break
            await asyncio.sleep(0.05)
        return await asyncio.wait_for(closed, 60)
    finally:
        writer.close()


async def test_slow_clients_do_not_pin_the_router_and_are_disconnected(router_port: int) -> None:
    slow = [asyncio.create_task((silent if i % 2 else trickling)(router_port)) for i in range(SLOW_CLIENTS)]
    await asyncio.sleep(0.3)  # every slow connection is open, holding an unfinished head
    assert not any(task.done() for task in slow)
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.get(f"http://127.0.0.1:{router_port}/")
    assert response.status_code == 400
    assert "ate-target-actor" in response.text
    assert await asyncio.gather(*slow) == [b""] * SLOW_CLIENTS  # each closed, nothing answered


async def test_a_head_over_the_limit_gets_431(router_port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", router_port)
    writer.write(b"GET / HTTP/1.1\r\nhost: x\r\ncookie: " + b"c" * (40 * 1024) + b"\r\n\r\n")
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 30)
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert b"connection: close" in head.split(b"\r\n")
    assert body == b"request head larger than 32768 bytes (request line and headers)\n"
