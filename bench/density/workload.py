"""The density run's workload: the counter actors it creates and what it sends them.

Every actor lives in atespace `ATESPACE` and is made from the counter template `TEMPLATE`. The
REST verbs (resume, suspend) go to many actors a few at a time; `GET /` goes through the router,
once per actor or round-robin for a while.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from bench.actors import CallFailed, call
from bench.common import summary
from domain.reasons import Reason

ATESPACE, TEMPLATE = "bench", "counter"


async def _each(names: list[str], concurrency: int, fn: Any) -> list[float]:
    """Runs `await fn(name)` for every name, `concurrency` at a time; seconds each."""
    sem = asyncio.Semaphore(concurrency)

    async def one(name: str) -> float:
        async with sem:
            t = time.monotonic()
            await fn(name)
            return time.monotonic() - t

    return list(await asyncio.gather(*(one(n) for n in names)))


async def run_verbs(api_url: str, token: str, names: list[str], verbs: list[str], concurrency: int) -> list[float]:
    """Each actor through the REST API: the verbs in order (e.g. resume then suspend); a resume that
    finds no free worker (NoCapacity) is retried."""
    async with httpx.AsyncClient(base_url=api_url, timeout=300, headers={"Authorization": f"Bearer {token}"}) as api:

        async def go(name: str) -> None:
            for verb in verbs:
                for attempt in range(20):
                    try:
                        await call(api, verb, ATESPACE, name)
                        break
                    except CallFailed as exc:  # a worker freed by a suspend a moment ago: try again
                        if exc.reason != Reason.NO_CAPACITY or attempt == 19:
                            raise
                        await asyncio.sleep(0.5)

        return await _each(names, concurrency, go)


async def get_each(router_url: str, names: list[str]) -> list[int]:
    """One `GET /` through the router per actor; their memory_count."""
    async with httpx.AsyncClient(base_url=router_url, timeout=60) as client:
        counts = []
        for name in names:
            r = await client.get("/", headers={"ate-target-actor": f"{ATESPACE}/{name}"})
            if r.status_code != 200:
                raise RuntimeError(f"GET / of {name}: HTTP {r.status_code} {r.text[:200]}")
            counts.append(int(r.json()["memory_count"]))
        return counts


async def router_load(router_url: str, names: list[str], seconds: float, concurrency: int = 8) -> dict[str, Any]:
    """`GET /` through the router round-robin over the actors for `seconds`; count and latencies."""
    lat: list[float] = []
    errors = 0
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(base_url=router_url, timeout=30) as client:

        async def loop(k: int) -> None:
            nonlocal errors
            i = k
            while time.monotonic() < deadline:
                t = time.monotonic()
                r = await client.get("/", headers={"ate-target-actor": f"{ATESPACE}/{names[i % len(names)]}"})
                if r.status_code == 200:
                    lat.append(time.monotonic() - t)
                else:
                    errors += 1
                i += concurrency

        await asyncio.gather(*(loop(k) for k in range(concurrency)))
    return {"requests": len(lat), "errors": errors, "latency": summary(lat)}
