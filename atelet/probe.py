"""Wakeup probes: HTTP GET against a sandbox until it answers 200.

A minimal HTTP/1.1 client on raw asyncio streams (``Connection: close``; the client closes
first, so no connection to the worker stays open to block a later checkpoint).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

from atelet.errors import precondition, unavailable


async def _status_of(host: str, port: int, request: bytes, timeout: float) -> int | None:
    """Send one HTTP/1.1 ``request`` (head and body, ``Connection: close``) and return the status
    code of the answer, None when the connection fails or no status line comes within ``timeout``
    seconds; the client closes first."""
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        writer.write(request)
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), timeout)
        parts = line.decode(errors="replace").split()
        return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None
    except (TimeoutError, OSError, ValueError):
        return None
    finally:
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass


async def http_status(host: str, port: int, path: str, timeout: float = 1.0) -> int | None:
    """Status code of ``GET http://host:port/path``, None when the connection fails."""
    head = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
    return await _status_of(host, port, head.encode(), timeout)


async def http_post(host: str, port: int, path: str, body: bytes, timeout: float) -> int | None:
    """Status code of ``POST http://host:port/path`` with a JSON ``body``, None when the connection
    fails or no status line comes within ``timeout`` seconds."""
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")  # fmt: skip
    return await _status_of(host, port, head.encode() + body, timeout)


FIRST_RETRY_SECONDS = 0.002
"""The pause before a probe's second attempt; each later pause doubles, up to the probe's interval.
A restored sandbox usually answers the first GET; when it does not (its listener is back a few ms
after ``runsc restore`` returns), a fixed 20 ms pause cost the whole 20 ms (the activation
benchmark's probe p95 was 19-32 ms against 8-15 for a 2 ms poll; bench/README.md)."""


def retry_pauses(interval: float, first: float = FIRST_RETRY_SECONDS) -> Iterator[float]:
    """The pauses (seconds) between a probe's attempts: ``first``, doubling, then ``interval`` on
    and on (2, 4, 8, 16, 20, 20, ... ms for the default 20 ms interval)."""
    pause = min(first, interval)
    while True:
        yield pause
        pause = min(pause * 2, interval)


async def wait_ready(host: str, port: int, path: str, timeout: float, interval: float = 0.02,
                     container: str = "", retryable: bool = True) -> float:
    """Polls until 200, pausing ``retry_pauses(interval)`` between attempts; returns the seconds
    waited.

    Args:
        container: the container the probe belongs to, named in the error.
        retryable: the code of the error after ``timeout``: UNAVAILABLE (a sandbox that ran
            before and may be reachable again) or, when False, FAILED_PRECONDITION (a boot or
            restore whose workload never woke up: retrying would wait as long again).

    Raises:
        AteletError: after ``timeout`` s without a 200, naming the probe and the last answer,
            e.g. ``wakeup probe GET :9999/readyz of container counter got no answer in 60 s
            (last: no connection)``.
    """
    start = time.monotonic()
    deadline = start + timeout
    last: int | None = None
    pauses = retry_pauses(interval)
    while True:
        remaining = deadline - time.monotonic()
        last = await http_status(host, port, path or "/", timeout=max(0.05, min(1.0, remaining)))
        if last == 200:
            return time.monotonic() - start
        pause = next(pauses)
        if time.monotonic() + pause > deadline:
            of = f" of container {container}" if container else ""
            answer = "no answer" if last is None else f"no 200 (last: HTTP {last})"
            reason = f"wakeup probe GET :{port}{path or '/'}{of} got {answer} in {timeout:g} s" + (
                " (last: no connection)" if last is None else "")
            raise unavailable(reason) if retryable else precondition(reason)
        await asyncio.sleep(pause)
