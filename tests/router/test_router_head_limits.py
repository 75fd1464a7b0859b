"""Slow and oversized request heads against a real `python -m router` process.

The router runs with `--head-timeout 2` and an api-server address where nothing listens, so a
complete request is answered at once (400 without a target; nothing is proxied). Clients that
open a connection and send nothing, or send a head a byte at a time (slowloris), do not keep a
normal request from being served, and the server closes each of them (asserted as an
end-of-stream the client reads, not by timing). A head larger than the limit gets 431. Each test
runs on both data paths (`--data-path python` and `nginx`).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from tests.router.router_harness import free_port

ROOT = Path(__file__).resolve().parents[2]
SLOW_CLIENTS = 40
STATUS_LINE_431 = {
    "python": b"HTTP/1.1 431 Request Header Fields Too Large",
    "nginx": b"HTTP/1.1 431 ",  # nginx knows no reason phrase for 431 and sends none (RFC 9112 allows it)
}


class Router(NamedTuple):
    """A running router process: its port and data path."""

    port: int
    data_path: str


@pytest.fixture(scope="module", params=["python", "nginx"])
def router(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    """A router process with a 2 s request-head timeout (its log in a file), on each data path."""
    run_dir = tmp_path_factory.mktemp(f"router-{request.param}")
    log = (run_dir / "router.log").open("w")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ATE_DATABASE_URL", None)
    data_path = ["--data-path", "nginx", "--nginx-run-dir", str(run_dir / "nginx")] if request.param == "nginx" else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "router", "--listen", f"127.0.0.1:{port}",
         "--metrics-listen", f"127.0.0.1:{free_port()}", "--api-server", f"http://127.0.0.1:{free_port()}",
         "--head-timeout", "2", *data_path],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=log, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        ready = {"python": "", "nginx": " (nginx data path, 1 worker)"}[request.param]
        assert proc.stdout.readline().strip() == f"router: ready on 127.0.0.1:{port}{ready}"
        yield Router(port, request.param)
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
        try:
            return await asyncio.wait_for(closed, 60)
        except ConnectionResetError:
            # Closed too, without an answer: nginx drops a connection whose head timed out at
            # once (no lingering close), so a byte that arrived after its last read makes the
            # kernel reset it (seen once in CI on the nginx data path).
            return b""
    finally:
        writer.close()


async def test_slow_clients_do_not_pin_the_router_and_are_disconnected(router: Router) -> None:
    slow = [asyncio.create_task((silent if i % 2 else trickling)(router.port)) for i in range(SLOW_CLIENTS)]
    await asyncio.sleep(0.3)  # every slow connection is open, holding an unfinished head
    assert not any(task.done() for task in slow)
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.get(f"http://127.0.0.1:{router.port}/")
    assert response.status_code == 400
    assert "ate-target-actor" in response.text
    assert await asyncio.gather(*slow) == [b""] * SLOW_CLIENTS  # each closed, nothing answered


@pytest.mark.parametrize(
    "head",
    [
        b"GET / HTTP/1.1\r\nhost: x\r\ncookie: " + b"c" * (40 * 1024) + b"\r\n\r\n",
        b"GET /" + b"p" * (40 * 1024) + b" HTTP/1.1\r\nhost: x\r\n\r\n",
    ],
    ids=["large-header", "large-request-line"],
)
async def test_a_head_over_the_limit_gets_431(router: Router, head: bytes) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
    writer.write(head)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 30)
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == STATUS_LINE_431[router.data_path]
    assert b"connection: close" in head.lower().split(b"\r\n")
    assert body == b"request head larger than 32768 bytes (request line and headers)\n"
