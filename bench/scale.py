"""Benchmark 4: resume and list latency with 10^4 and 10^6 actor rows (hollow atelet).

Rows are bulk-inserted straight into the ate database in the shape `create_actor` writes
(atespace, name, template; every other column its default: SUSPENDED, version 1, no worker,
no snapshot) with `session_replication_role = replica` so the per-row NOTIFY trigger (and the
FK triggers) do not fire: a million NOTIFYs would flood every router's LISTEN connection.
Then ANALYZE. At each size: resume through the REST API of actors picked at random among the
bulk rows (first resume: golden snapshot path, like any new actor) each followed by a suspend,
`GET /v1/actors?page_size=100` (first page) and a deep page (page token of a key ~80% in), and
`GET /v1/atespaces/bench/actors?page_size=100`. RSS of every process at the largest size.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import httpx

from bench import stack as stack_mod
from bench.actors import call, setup
from bench.common import Log, machine, measurements, ms, rss_bytes, summary, table, write_result

ATESPACE = "bench"


def _name(i: int) -> str:
    return f"s{i:08d}"


async def _insert(dsn: str, start: int, end: int) -> float:
    """Insert actors `start`..`end - 1` (never resumed) and return the seconds it took."""
    async with measurements(dsn) as db:
        t = time.monotonic()
        total = await db.insert_actors(ATESPACE, "counter", start, end)
    assert total >= end
    return time.monotonic() - t


async def _measure(stack: stack_mod.Stack, size: int, cycles: int, used: set[int]) -> dict[str, list[float]]:
    from api.views import encode_page_token

    api = httpx.AsyncClient(base_url=stack.api_url, headers=stack.headers, timeout=60)
    data: dict[str, list[float]] = {"resume": [], "suspend": [], "list_first": [], "list_deep": [], "list_atespace": []}
    rng = random.Random(size)
    try:
        for i in range(cycles + 3):
            k = rng.randrange(size)
            while k in used:
                k = rng.randrange(size)
            used.add(k)
            t = time.monotonic()
            await call(api, "resume", ATESPACE, _name(k))
            r = time.monotonic() - t
            t = time.monotonic()
            await call(api, "suspend", ATESPACE, _name(k))
            s = time.monotonic() - t
            deep = encode_page_token((ATESPACE, _name(int(size * 0.8) + rng.randrange(size // 20))))
            t = time.monotonic()
            (await api.get("/v1/actors", params={"page_size": 100})).raise_for_status()
            lf = time.monotonic() - t
            t = time.monotonic()
            resp = await api.get("/v1/actors", params={"page_size": 100, "page_token": deep})
            resp.raise_for_status()
            ld = time.monotonic() - t
            assert len(resp.json()["items"]) == 100
            t = time.monotonic()
            (await api.get(f"/v1/atespaces/{ATESPACE}/actors", params={"page_size": 100})).raise_for_status()
            la = time.monotonic() - t
            if i >= 3:
                for key, v in (
                    ("resume", r),
                    ("suspend", s),
                    ("list_first", lf),
                    ("list_deep", ld),
                    ("list_atespace", la),
                ):
                    data[key].append(v)
    finally:
        await api.aclose()
    return data


async def _sql_variants(dsn: str, size: int, reps: int = 15) -> dict[str, dict[str, float]]:
    """Deep page straight on Postgres: queries.sql list_actors vs its candidate in
    store/measurements.sql (same rows)."""
    out: dict[str, list[float]] = {"sql_current": [], "sql_variant": []}
    async with measurements(dsn) as db:
        rng = random.Random(7)
        for _ in range(reps):
            key = _name(int(size * 0.8) + rng.randrange(size // 20))
            for name in ("sql_current", "sql_variant"):
                seconds, rows = await db.time_list_actors(name == "sql_variant", None, ATESPACE, key, 101, None)
                out[name].append(seconds)
                assert rows == 101
    return {k: summary(v) for k, v in out.items()}


async def _cleanup(dsn: str) -> None:
    """Drop the never-resumed bulk rows, so that `ate dev`'s stop (which pages through every actor to
    find RUNNING ones) does not take minutes."""
    async with measurements(dsn) as db:
        await db.delete_never_resumed_actors()


async def _table_sizes(dsn: str) -> dict[str, Any]:
    async with measurements(dsn) as db:
        n, heap, idx = await db.actors_table()
        lines = await db.explain_list_actors(None, ATESPACE, _name(n * 8 // 10), 101, None)
    return {
        "rows": n,
        "heap": heap,
        "indexes": idx,
        "bytes_per_row": (heap + idx) / n,
        "deep_plan": " | ".join(line.strip() for line in lines[:6]),
        "deep_plan_full": lines,
    }


def run(
    sizes: list[int] | None = None, cycles: int = 30, keep: bool = False, log: Log = print
) -> dict[int, dict[str, Any]]:
    sizes = sizes or [10_000, 1_000_000]
    stack = stack_mod.start(workers=2, hollow=True, keep=keep, log=log)
    results: dict[int, dict[str, Any]] = {}
    inserted = 0
    used: set[int] = set()
    rss: dict[str, float] = {}
    sizes_db: dict[str, Any] = {}
    try:
        setup(stack.api_url, stack.token, ATESPACE, [])
        for size in sizes:
            secs = asyncio.run(_insert(stack.dsn, inserted, size))
            log(f"scale: {size - inserted} rows inserted in {secs:.1f} s (now {size})")
            inserted = size
            data = asyncio.run(_measure(stack, size, cycles, used))
            results[size] = {"insert_s": secs, **{k: summary(v) for k, v in data.items()}, "raw": data}
            results[size].update(asyncio.run(_sql_variants(stack.dsn, size)))
            log(f"scale: measured at {size}")
        rss = {k: sum(rss_bytes(p) for p in v) / 2**20 for k, v in stack.processes().items()}
        sizes_db = asyncio.run(_table_sizes(stack.dsn))
        asyncio.run(_cleanup(stack.dsn))
    finally:
        stack.stop()
    lo, hi = sizes[0], sizes[-1]
    keys = ["resume", "suspend", "list_first", "list_deep", "list_atespace", "sql_current", "sql_variant"]
    rows = []
    for k in keys:
        a, b = results[lo][k], results[hi][k]
        rows.append(
            [k, ms(a["p50"]), ms(a["p95"]), ms(b["p50"]), ms(b["p95"]), b["p50"] / a["p50"], b["p95"] / a["p95"]]
        )
    text = "\n".join(
        [
            f"latency at {lo} and {hi} actor rows, {cycles} samples each, hollow atelet (ms)",
            table(["operation", f"p50 @{lo}", f"p95 @{lo}", f"p50 @{hi}", f"p95 @{hi}", "x p50", "x p95"], rows),
            "RSS at the largest size (MiB): " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(rss.items())),
            f"actors table at {hi} rows: heap+toast {sizes_db.get('heap', 0) / 2**20:.0f} MiB, indexes "
            f"{sizes_db.get('indexes', 0) / 2**20:.0f} MiB, {sizes_db.get('bytes_per_row', 0):.0f} bytes/row in all; "
            f"deep-page plan: {sizes_db.get('deep_plan', '')}",
            "bulk insert: " + ", ".join(f"{s} rows total in {results[s]['insert_s']:.1f} s" for s in sizes),
            f"KEY scale {hi}/{lo}: resume p50 x{rows[0][5]:.2f} p95 x{rows[0][6]:.2f},"
            f" list first p50 x{rows[2][5]:.2f}, list deep p50 x{rows[3][5]:.2f} (target <=1.2)",
        ]
    )
    path = write_result(
        "scale",
        {
            "benchmark": "scale",
            "machine": machine(),
            "sizes": sizes,
            "results": {str(k): v for k, v in results.items()},
            "rss_mib": rss,
            "db": sizes_db,
            "text": text,
        },
    )
    print(text.replace("\nKEY", f"\nresults: {path}\nKEY"))
    return results
