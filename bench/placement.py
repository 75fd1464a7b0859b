"""Benchmark: placement and whole-resume time with 10, 1,000 and 10,000 registered workers, and
the ratio 10,000 : 10 (issue 12, "Flat cost"; goal <= 1.2).

The stack is `ate dev` with a hollow atelet of 2 workers (node `atebench`, pool labels
`bench=real`). The other workers are hollow registrations: nodes `hollow-<i>` of 10 workers each
(labels `bench=hollow`, runsc build `hollow` as the hollow atelet reports), registered through
`store.nodes.register` as an atelet's heartbeat is (every row change announced on
`ate_worker_changes`), with no atelet behind them; their heartbeat is kept fresh by one UPDATE a
second so that they stay ACTIVE. Sizes count every worker (2 real + N - 2 hollow) and grow
10 -> 1,000 -> 10,000; then the hollow nodes are deleted and size 10 is measured again, the
baseline taken twice in the same run (the machine is shared: its load moves).

At each size, interleaved cycle by cycle:

- **placement**: `begin_resume` of an actor without a worker selector, in this process, with the
  production code (`Store.resumes.begin`: actor row lock, the worker view's choice among *all* N
  workers, the bind under the worker's row lock, RESUMING), then `rollback` (not timed). Every
  one of the N workers is a candidate.
- **resume**: `POST .../resume` of an actor selecting `bench=real` through the REST API (API ->
  Temporal -> begin_resume in the Temporal worker, whose view holds all N workers -> the hollow
  atelet's Restore -> RUNNING), then a suspend (not timed). The N - 2 hollow workers are
  registered and ACTIVE in the view but not candidates for it (labels): they have no atelet.

Also: how long a fresh worker view takes to load at each size (what a restarted Temporal worker
pays once, before its first placement).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import stack as stack_mod
from bench.actors import call, setup
from bench.common import Log, machine, measurements, ms, summary, table, write_result

ATESPACE = "bench"
PER_NODE = 10
"""Workers per hollow node."""
HOLLOW_PREFIX = "hollow-"
"""The name prefix of the hollow nodes (and of their workers)."""
REAL_WORKERS = 2
WARMUP = 10
"""Cycles at each size before the measured ones."""
GIB = 2**30


def _pool_file() -> Path:
    path = Path(tempfile.mkstemp(prefix="ate-bench-pool-", suffix=".yaml")[1])
    path.write_text(
        "apiVersion: ate.dev/v1alpha1\nkind: WorkerPool\nmetadata: {name: default, labels: {bench: real}}\n"
        f"spec:\n  replicas: {REAL_WORKERS}\n  sandboxClass: gvisor\n"
        "  capacity: {places: 1, cpu: '2', memory: 2Gi}\n"
    )
    return path


async def _register(store: Any, have: int, want: int) -> float:
    """Grow the hollow workers from `have` to `want`: nodes `hollow-<i>` of PER_NODE workers (the
    last one fewer), each registered as an atelet's heartbeat is; seconds taken."""
    from store.records import WorkerRegistration

    t = time.monotonic()
    for i in range(have // PER_NODE, -(-want // PER_NODE)):
        workers = [
            WorkerRegistration(
                name=f"hollow-{j}",
                pool="hollow",
                ip=f"10.{96 + i // 65536}.{i // 256 % 256}.{i % 256}",
                sandbox_class="gvisor",
                labels={"bench": "hollow"},
                places=1,
                cpu_millis=2000,
                memory_bytes=2 * GIB,
            )
            for j in range(min(PER_NODE, want - i * PER_NODE))
        ]
        await store.nodes.register(f"{HOLLOW_PREFIX}{i:05d}", "127.0.0.1:1", "hollow", workers)
    return time.monotonic() - t


async def _keep_alive(dsn: str, stop: asyncio.Event) -> None:
    """The hollow nodes' heartbeat: one UPDATE a second (a node update announces nothing)."""
    async with measurements(dsn) as db:
        while not stop.is_set():
            await db.heartbeat_nodes(HOLLOW_PREFIX)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)


async def _unregister(dsn: str) -> None:
    """Delete the hollow nodes and their workers (announced: worker views drop them)."""
    async with measurements(dsn) as db:
        await db.delete_nodes(HOLLOW_PREFIX)


async def _counts(dsn: str) -> tuple[int, int]:
    """(workers, ACTIVE workers) as the table says."""
    async with measurements(dsn) as db:
        return await db.worker_counts()


async def _view_load_seconds(dsn: str, reps: int = 3) -> float:
    """The best of `reps` loads of a fresh worker view (connect not counted)."""
    from store import Store

    best = float("inf")
    for _ in range(reps):
        store = await Store.connect(dsn, min_size=1, max_size=2)
        try:
            await store.ping()  # a connection open: its connect is not counted
            t = time.monotonic()
            await store.placement.view.ready()
            best = min(best, time.monotonic() - t)
        finally:
            await store.close()
    return best


async def _measure(stack: stack_mod.Stack, store: Any, size: int, cycles: int, tag: str) -> dict[str, list[float]]:
    from domain.refs import ActorRef

    view = store.placement.view
    await view.sync()
    assert len(view.workers) == size, (len(view.workers), size)
    api = httpx.AsyncClient(base_url=stack.api_url, headers=stack.headers, timeout=60)
    data: dict[str, list[float]] = {"placement": [], "resume": []}
    placed_on_hollow = 0
    try:
        for i in range(cycles + WARMUP):
            ref = ActorRef(ATESPACE, "p0")
            op = f"bench-{tag}-{i}"
            t = time.monotonic()
            plan = await store.resumes.begin(ref, op)
            p = time.monotonic() - t
            await store.resumes.rollback(ref, op, "benchmark: placement only")
            assert plan.worker is not None
            placed_on_hollow += plan.worker.node.startswith(HOLLOW_PREFIX)
            t = time.monotonic()
            await call(api, "resume", ATESPACE, "r0")
            r = time.monotonic() - t
            await call(api, "suspend", ATESPACE, "r0")
            if i >= WARMUP:
                data["placement"].append(p)
                data["resume"].append(r)
    finally:
        await api.aclose()
    data["hollow_share"] = [placed_on_hollow / (cycles + WARMUP)]
    return data


async def _run(stack: stack_mod.Stack, sizes: list[int], cycles: int, log: Log) -> dict[str, dict[str, Any]]:
    from ate.cli.client import ApiClient
    from store import Store

    with ApiClient(stack.api_url, timeout=60, token=stack.token) as api:
        api.create_actor(ATESPACE, "p0", "counter", {})
        api.create_actor(ATESPACE, "r0", "counter", {"bench": "real"})
    store = await Store.connect(stack.dsn, min_size=2, max_size=4)
    stop = asyncio.Event()
    alive = asyncio.create_task(_keep_alive(stack.dsn, stop))
    results: dict[str, dict[str, Any]] = {}
    hollow = 0
    try:
        async with httpx.AsyncClient(base_url=stack.api_url, headers=stack.headers, timeout=60) as warm:
            for _ in range(3):  # the stack's worker view is loaded by its first placement
                await call(warm, "resume", ATESPACE, "r0")
                await call(warm, "suspend", ATESPACE, "r0")
        runs = [(str(s), s) for s in sizes] + [(f"{sizes[0]} again", sizes[0])]
        for tag, size in runs:
            want = size - REAL_WORKERS
            if want < hollow:
                await _unregister(stack.dsn)
                hollow = 0
                log("placement: hollow nodes deleted")
            secs = await _register(store, hollow, want)
            log(f"placement: {want - hollow} hollow workers registered in {secs:.1f} s ({size} in all)")
            hollow = want
            total, active = await _counts(stack.dsn)
            assert total == active == size, (total, active, size)
            load = await _view_load_seconds(stack.dsn)
            data = await _measure(stack, store, size, cycles, tag.replace(" ", "-"))
            total, active = await _counts(stack.dsn)
            assert total == active == size, (total, active, size)  # none lost meanwhile
            results[tag] = {
                "workers": size,
                "register_s": secs,
                "view_load_s": load,
                "placed_on_hollow": data["hollow_share"][0],
                "placement": summary(data["placement"]),
                "resume": summary(data["resume"]),
                "raw": {k: data[k] for k in ("placement", "resume")},
            }
            log(
                f"placement: {tag}: placement p50 {ms(results[tag]['placement']['p50']):.1f} ms, "
                f"resume p50 {ms(results[tag]['resume']['p50']):.1f} ms"
            )
        await _unregister(stack.dsn)
    finally:
        stop.set()
        await alive
        await store.close()
    return results


def run(sizes: list[int] | None = None, cycles: int = 200, keep: bool = False, log: Log = print) -> dict[str, Any]:
    sizes = sizes or [10, 1_000, 10_000]
    pool = _pool_file()
    stack = stack_mod.start(pool=pool, hollow=True, keep=keep, log=log)
    try:
        setup(stack.api_url, stack.token, ATESPACE, [])
        results = asyncio.run(_run(stack, sizes, cycles, log))
    finally:
        stack.stop()
        pool.unlink(missing_ok=True)
    lo, hi = str(sizes[0]), str(sizes[-1])
    rows = [
        [
            tag,
            r["workers"],
            ms(r["placement"]["p50"]),
            ms(r["placement"]["p95"]),
            ms(r["resume"]["p50"]),
            ms(r["resume"]["p95"]),
            ms(r["view_load_s"]),
            f"{r['placed_on_hollow']:.0%}",
        ]
        for tag, r in results.items()
    ]
    base = {  # the lower of the two baselines: the ratio is never flattered by a slow first one
        (k, q): min(results[lo][k][q], results[f"{lo} again"][k][q])
        for k in ("placement", "resume")
        for q in ("p50", "p95")
    }
    ratio = {f"{k}_{q}": results[hi][k][q] / base[(k, q)] for k, q in base}
    first = {f"{k}_{q}": results[hi][k][q] / results[lo][k][q] for k, q in base}
    again = {f"{k}_{q}": results[hi][k][q] / results[f"{lo} again"][k][q] for k, q in base}
    text = "\n".join(
        [
            f"placement (begin_resume in this process, every worker a candidate) and whole resume (REST API, "
            f"hollow atelet) by registered workers, {cycles} samples each, interleaved (ms)",
            table(
                [
                    "size",
                    "workers",
                    "placement p50",
                    "placement p95",
                    "resume p50",
                    "resume p95",
                    "view load",
                    "placed on hollow",
                ],
                rows,
            ),
            f"ratio {hi}:{lo} (first baseline): placement p50 x{first['placement_p50']:.2f} p95 "
            f"x{first['placement_p95']:.2f}, resume p50 x{first['resume_p50']:.2f} p95 x{first['resume_p95']:.2f}",
            f"ratio {hi}:{lo} again (baseline after): placement p50 x{again['placement_p50']:.2f} p95 "
            f"x{again['placement_p95']:.2f}, resume p50 x{again['resume_p50']:.2f} p95 x{again['resume_p95']:.2f}",
            f"KEY placement {hi}:{lo} workers (against the lower baseline): placement p50 x{ratio['placement_p50']:.2f} p95 "
            f"x{ratio['placement_p95']:.2f}, whole resume p50 x{ratio['resume_p50']:.2f} p95 "
            f"x{ratio['resume_p95']:.2f} (goal <=1.2)",
        ]
    )
    path = write_result(
        "placement",
        {
            "benchmark": "placement",
            "machine": machine(),
            "sizes": sizes,
            "cycles": cycles,
            "results": results,
            "ratio": ratio,
            "ratio_first": first,
            "ratio_again": again,
            "text": text,
        },
    )
    print(text.replace("\nKEY", f"\nresults: {path}\nKEY"))
    return results
