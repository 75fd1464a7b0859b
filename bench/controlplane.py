"""Benchmarks 2 and 3: the control plane (hollow atelet: no runsc) against a bare Temporal workflow.

temporal-floor: sequential latency, interleaved per cycle so both see the same machine state:
  floor      BenchFloor (one no-op regular activity: ResumeActor's shape) started +
             awaited by a Temporal client;
  wf         ResumeActor started + awaited by a Temporal client directly (same call as the API);
  api        POST /v1/.../resume through the REST API (what the router waits for);
  suspend    POST /v1/.../suspend (not timed against the floor; it resets the actor).
throughput: C concurrent loops of (resume, suspend) through the REST API over A actors on W
  hollow workers for S seconds, then the floor saturated the same way (C concurrent loops of
  BenchFloor) for S seconds; ratio = ours workflows/s (2 per cycle) / floor workflows/s. CPU
  seconds per process over the window, and a py-spy profile of an extra window.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import profile as prof
from bench import stack as stack_mod
from bench.actors import call, setup
from bench.common import ROOT, CpuMeter, Log, machine, ms, summary, table, write_result
from bench.floorwf import TASK_QUEUE as FLOOR_QUEUE

ATESPACE = "bench"


def start_floor_worker(stack: stack_mod.Stack) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.floorwf", "--address", stack.temporal_address],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "floor: ready" not in line:
        proc.kill()
        raise RuntimeError(f"floor worker did not start: {line}")
    return proc


async def _floor_once(temporal: Any, i: int) -> float:
    t = time.monotonic()
    handle = await temporal.start_workflow(
        "BenchFloor", "x", id=f"bench-floor-{time.time_ns()}-{i}", task_queue=FLOOR_QUEUE, result_type=str
    )
    await handle.result()
    return time.monotonic() - t


async def _resume_wf(temporal: Any, name: str) -> float:
    from api.operations import search_attributes
    from domain.operations.resume import ResumeActorInput, ResumeActorResult
    from domain.refs import ActorRef
    from domain.states import Operation
    from domain.temporal import TASK_QUEUE

    ref = ActorRef(ATESPACE, name)
    t = time.monotonic()
    handle = await temporal.start_workflow(
        Operation.RESUME.value,
        ResumeActorInput(actor=ref),
        id=ref.workflow_id,
        task_queue=TASK_QUEUE,
        result_type=ResumeActorResult,
        search_attributes=search_attributes(ATESPACE, name, Operation.RESUME),
    )
    await handle.result()
    return time.monotonic() - t


async def _latency(stack: stack_mod.Stack, cycles: int, log: Log) -> dict[str, list[float]]:
    from temporalio.client import Client

    temporal = await Client.connect(stack.temporal_address)
    api = httpx.AsyncClient(base_url=stack.api_url, headers=stack.headers, timeout=60)
    data: dict[str, list[float]] = {"floor": [], "wf": [], "api": [], "suspend": []}
    try:
        for i in range(cycles + 5):
            f = await _floor_once(temporal, i)
            w = await _resume_wf(temporal, "h1")
            t = time.monotonic()
            await call(api, "suspend", ATESPACE, "h1")
            s = time.monotonic() - t
            t = time.monotonic()
            await call(api, "resume", ATESPACE, "h1")
            a = time.monotonic() - t
            await call(api, "suspend", ATESPACE, "h1")
            if i >= 5:  # warm-up
                for k, v in (("floor", f), ("wf", w), ("api", a), ("suspend", s)):
                    data[k].append(v)
            if (i + 1) % 25 == 0:
                log(f"temporal-floor: {i + 1}/{cycles + 5}")
    finally:
        await api.aclose()
    return data


def run_latency(cycles: int = 100, keep: bool = False, log: Log = print) -> dict[str, Any]:
    stack = stack_mod.start(workers=2, hollow=True, keep=keep, log=log)
    floor = None
    try:
        setup(stack.api_url, stack.token, ATESPACE, ["h1"])
        floor = start_floor_worker(stack)
        data = asyncio.run(_latency(stack, cycles, log))
    finally:
        if floor is not None:
            floor.terminate()
            floor.wait(30)
        stack.stop()
    s = {k: summary(v) for k, v in data.items()}
    rows = [
        [
            name,
            ms(s[k]["p50"]),
            ms(s[k]["p95"]),
            ms(s[k]["p99"]),
            s[k]["p50"] / s["floor"]["p50"],
            s[k]["p95"] / s["floor"]["p95"],
        ]
        for k, name in (
            ("floor", "floor: BenchFloor, one no-op regular activity (client)"),
            ("wf", "ResumeActor via Temporal client (hollow)"),
            ("api", "ResumeActor via REST API (hollow)"),
            ("suspend", "SuspendActor via REST API (hollow)"),
        )
    ]
    text = "\n".join(
        [
            f"sequential latency, {cycles} cycles interleaved, hollow atelet (ms; ratio = ours / floor)",
            table(["path", "p50", "p95", "p99", "x p50", "x p95"], rows),
            f"KEY temporal-floor p50/p95 ms: floor {ms(s['floor']['p50']):.1f}/{ms(s['floor']['p95']):.1f}"
            f" resume-wf {ms(s['wf']['p50']):.1f}/{ms(s['wf']['p95']):.1f}"
            f" resume-api {ms(s['api']['p50']):.1f}/{ms(s['api']['p95']):.1f}"
            f" ratio p95 wf {s['wf']['p95'] / s['floor']['p95']:.2f}x api {s['api']['p95'] / s['floor']['p95']:.2f}x"
            f" (target <=1.5x)",
        ]
    )
    path = write_result(
        "temporal-floor", {"benchmark": "temporal-floor", "machine": machine(), "summary": s, "raw": data, "text": text}
    )
    print(text.replace("\nKEY", f"\nresults: {path}\nKEY"))
    return s


def pool_file(workers: int) -> Path:
    path = Path(tempfile.mkstemp(prefix="ate-bench-pool-", suffix=".yaml")[1])
    path.write_text(
        "apiVersion: ate.dev/v1alpha1\nkind: WorkerPool\nmetadata: {name: hollow, labels: {}}\n"
        f"spec:\n  replicas: {workers}\n  sandboxClass: gvisor\n"
        "  capacity: {places: 1, cpu: '2', memory: 2Gi}\n"
    )
    return path


async def _ours_loop(
    stack: stack_mod.Stack,
    actors: list[str],
    concurrency: int,
    seconds: float,
    lat: dict[str, list[float]],
    errors: list[str],
) -> int:
    limits = httpx.Limits(max_connections=concurrency * 2, max_keepalive_connections=concurrency * 2)
    api = httpx.AsyncClient(base_url=stack.api_url, headers=stack.headers, timeout=120, limits=limits)
    deadline = time.monotonic() + seconds
    cycles = 0

    async def loop(j: int) -> None:
        nonlocal cycles
        mine = actors[j::concurrency]
        k = 0
        while time.monotonic() < deadline:
            name = mine[k % len(mine)]
            k += 1
            try:
                t = time.monotonic()
                await call(api, "resume", ATESPACE, name)
                t2 = time.monotonic()
                await call(api, "suspend", ATESPACE, name)
                t3 = time.monotonic()
            except Exception as exc:  # count and go on; bounded by the deadline
                errors.append(str(exc)[:500])
                await asyncio.sleep(0.05)
                continue
            lat["resume"].append(t2 - t)
            lat["suspend"].append(t3 - t2)
            if t3 <= deadline:
                cycles += 1

    try:
        await asyncio.gather(*(loop(j) for j in range(concurrency)))
    finally:
        await api.aclose()
    return cycles


async def _floor_loop(address: str, concurrency: int, seconds: float, lat: list[float]) -> int:
    from temporalio.client import Client

    temporal = await Client.connect(address)
    deadline = time.monotonic() + seconds
    done = 0

    async def loop(j: int) -> None:
        nonlocal done
        i = 0
        while time.monotonic() < deadline:
            d = await _floor_once(temporal, j * 1_000_000 + i)
            i += 1
            lat.append(d)
            if time.monotonic() <= deadline:
                done += 1

    await asyncio.gather(*(loop(j) for j in range(concurrency)))
    return done


def run_throughput(
    actors: int = 200,
    workers: int = 50,
    concurrency: int = 32,
    seconds: float = 30.0,
    profile: bool = True,
    keep: bool = False,
    log: Log = print,
) -> dict[str, Any]:
    pool = pool_file(workers)
    stack = stack_mod.start(pool=pool, hollow=True, keep=keep, log=log)
    floor = None
    names = [f"t{i:05d}" for i in range(actors)]
    lat: dict[str, list[float]] = {"resume": [], "suspend": []}
    errors: list[str] = []
    profiles: dict[str, Any] = {"skipped": "--no-profile"}
    try:
        setup(stack.api_url, stack.token, ATESPACE, names)
        floor = start_floor_worker(stack)
        groups = stack.processes()
        groups["floor-worker"] = [floor.pid]
        groups["bench-client"] = [os.getpid()]
        groups.pop("ate-dev", None)
        # warm-up: 3 s, not counted
        asyncio.run(_ours_loop(stack, names, concurrency, 3.0, {"resume": [], "suspend": []}, []))
        log(f"throughput: ours for {seconds:.0f} s ({concurrency} loops, {actors} actors, {workers} hollow workers)")
        meter = CpuMeter(groups)
        meter.start()
        cycles = asyncio.run(_ours_loop(stack, names, concurrency, seconds, lat, errors))
        cpu_ours = meter.stop()
        wall_ours = meter.wall
        if profile:
            pids = {k: v[0] for k, v in groups.items() if k in ("api-server", "worker", "atelet", "router") and v}
            handle = prof.start(pids, 15)
            log("throughput: profiling a further 15 s of the same load")
            asyncio.run(_ours_loop(stack, names, concurrency, 16.0, {"resume": [], "suspend": []}, []))
            profiles = prof.finish(handle)
        floor_lat: list[float] = []
        log(f"throughput: floor for {seconds:.0f} s ({concurrency} loops)")
        asyncio.run(_floor_loop(stack.temporal_address, concurrency, 3.0, []))
        meter = CpuMeter(groups)
        meter.start()
        floor_done = asyncio.run(_floor_loop(stack.temporal_address, concurrency, seconds, floor_lat))
        cpu_floor = meter.stop()
        wall_floor = meter.wall
        rss = {
            k: sum(__import__("bench.common", fromlist=["rss_bytes"]).rss_bytes(p) for p in v)
            for k, v in groups.items()
        }
    finally:
        if floor is not None:
            floor.terminate()
            floor.wait(30)
        stack.stop()
        pool.unlink(missing_ok=True)
    ours_wf_s = 2 * cycles / wall_ours
    floor_wf_s = floor_done / wall_floor
    ratio = ours_wf_s / floor_wf_s
    cpu_rows = [
        [
            k,
            cpu_ours.get(k, 0.0),
            1000 * cpu_ours.get(k, 0.0) / max(2 * cycles, 1),
            cpu_floor.get(k, 0.0),
            1000 * cpu_floor.get(k, 0.0) / max(floor_done, 1),
            rss.get(k, 0) / 2**20,
        ]
        for k in sorted(cpu_ours, key=lambda k: -cpu_ours[k])
    ]
    rs, ss, fs = summary(lat["resume"]), summary(lat["suspend"]), summary(floor_lat)
    text = "\n".join(
        [
            f"throughput over {seconds:.0f} s, concurrency {concurrency}, {actors} actors, {workers} hollow workers",
            table(
                ["what", "count", "per s", "p50 ms", "p95 ms", "p99 ms"],
                [
                    [
                        "ours: resume+suspend cycles (REST API)",
                        cycles,
                        cycles / wall_ours,
                        ms(rs["p50"]) + ms(ss["p50"]),
                        ms(rs["p95"]) + ms(ss["p95"]),
                        ms(rs["p99"]) + ms(ss["p99"]),
                    ],
                    [
                        "  of which resume",
                        len(lat["resume"]),
                        len(lat["resume"]) / wall_ours,
                        ms(rs["p50"]),
                        ms(rs["p95"]),
                        ms(rs["p99"]),
                    ],
                    [
                        "  of which suspend",
                        len(lat["suspend"]),
                        len(lat["suspend"]) / wall_ours,
                        ms(ss["p50"]),
                        ms(ss["p95"]),
                        ms(ss["p99"]),
                    ],
                    ["ours: workflows (2 per cycle)", 2 * cycles, ours_wf_s, "", "", ""],
                    [
                        "floor: BenchFloor workflows (client)",
                        floor_done,
                        floor_wf_s,
                        ms(fs["p50"]),
                        ms(fs["p95"]),
                        ms(fs["p99"]),
                    ],
                ],
            ),
            f"errors during ours: {len(errors)}" + (f" (first: {errors[0]})" if errors else ""),
            "",
            "CPU seconds by process over each window (ms per workflow), RSS at the end",
            table(["process", "cpu s ours", "ms/wf ours", "cpu s floor", "ms/wf floor", "RSS MiB"], cpu_rows),
            "",
            prof.render(profiles),
            f"KEY throughput: ours {cycles / wall_ours:.1f} cycles/s = {ours_wf_s:.1f} wf/s, floor {floor_wf_s:.1f} wf/s,"
            f" ratio {100 * ratio:.0f}% (target >=70%)",
        ]
    )
    result = {
        "benchmark": "throughput",
        "machine": machine(),
        "cycles": cycles,
        "wall": wall_ours,
        "ours_wf_per_s": ours_wf_s,
        "floor_wf_per_s": floor_wf_s,
        "ratio": ratio,
        "resume": rs,
        "suspend": ss,
        "floor_latency": fs,
        "cpu_ours": cpu_ours,
        "cpu_floor": cpu_floor,
        "rss": rss,
        "errors": errors[:20],
        "n_errors": len(errors),
        "profiles": profiles,
        "text": text,
        "params": {"actors": actors, "workers": workers, "concurrency": concurrency, "seconds": seconds},
    }
    path = write_result("throughput", result)
    print(text.replace("\nKEY", f"\nresults: {path}\nKEY"))
    return result
