"""The wakeup probe's pauses between attempts (atelet/probe.py): 2 ms first, doubling, then the
probe's interval; and a probe reaches a listener that comes up while it polls (real sockets)."""

from __future__ import annotations

import asyncio
import itertools

from atelet import probe
from tests.atelet.conftest import free_port


def test_the_pauses_start_at_2_ms_and_double_up_to_the_interval() -> None:
    pauses = list(itertools.islice(probe.retry_pauses(0.02), 8))
    assert pauses == [0.002, 0.004, 0.008, 0.016, 0.02, 0.02, 0.02, 0.02]


def test_an_interval_below_the_first_pause_is_kept() -> None:
    assert list(itertools.islice(probe.retry_pauses(0.001), 3)) == [0.001, 0.001, 0.001]


async def test_a_listener_that_comes_up_while_the_probe_polls_is_reached() -> None:
    port = free_port()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    async def listen_later() -> asyncio.Server:
        await asyncio.sleep(0.05)  # the first attempts are refused
        return await asyncio.start_server(answer, "127.0.0.1", port)

    later = asyncio.create_task(listen_later())
    waited = await probe.wait_ready("127.0.0.1", port, "/readyz", timeout=10)
    server = await later
    server.close()
    await server.wait_closed()
    assert waited >= 0.05  # it was refused first, then reached the listener
