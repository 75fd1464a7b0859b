"""The density run: its phases in order, each measuring one thing and returning its figures.

`run` measures the workers (their networks alone, then a stack with 2 and one with N), then on
the N-worker stack: the actors created, N resumed (RUNNING), the bare baseline with the idle CPU
window, the request CPU window, and all of them idle. The figures go into one results dict, in
the order the phases ran; `bench.density.report` turns it into the text and the KEY line.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from bench import stack as stack_mod
from bench.actors import COUNTER, setup
from bench.common import CpuMeter, Log, machine, summary, write_result
from bench.density.bare import Bare
from bench.density.database import db_sizes
from bench.density.disk import disk, du, temporal_db
from bench.density.memory import GIB, mem_available, meminfo
from bench.density.networks import netns_cost, netns_list
from bench.density.report import report
from bench.density.sandboxes import runsc_list, runsc_processes, sandboxes
from bench.density.stacks import control_plane, cpu_groups, node_name, stop_and_check
from bench.density.workload import ATESPACE, TEMPLATE, get_each, router_load, run_verbs


def run(
    running: int = 30,
    idle: int = 200,
    concurrency: int = 4,
    cpu_seconds: float = 20.0,
    keep: bool = False,
    log: Log = print,
) -> dict[str, Any]:
    """The whole benchmark (see `bench.density`); prints the table, writes results JSON."""
    settle = 5.0
    concurrency = max(1, min(concurrency, running))  # one worker per resume in flight
    res: dict[str, Any] = {"benchmark": "density", "n_running": running, "n_idle": idle, "concurrency": concurrency}
    res.update(_machine_at_start(log))

    # 1. what idle workers cost: their networks alone; a stack with 2 workers, then the one with N
    res["netns_direct"] = nd = netns_cost(min(max(running, 100), 1000))  # >= 100: a few MiB, above the noise
    log(f"density: {nd['count']} worker networks made directly: {nd['delta']}")
    stack, res["workers_2"] = _workers_stack(2, keep, log, settle)
    res["cleanup_2"] = stop_and_check(stack, keep, log)
    time.sleep(settle)
    stack, res["workers_n"] = _workers_stack(running, keep, log, settle)
    names = [f"r{i:03d}" for i in range(running)]
    idles = [f"i{i:04d}" for i in range(idle)]
    try:
        _measure(stack, names, idles, concurrency, cpu_seconds, settle, res, log)
    finally:
        res["cleanup"] = stop_and_check(stack, keep, log)
    res["end"] = {"runsc_processes": runsc_processes(), "mem_available": mem_available()}
    try:
        text = report(res)
    except Exception:
        write_result("density", res)  # the raw figures, for a report that failed
        raise
    res["text"] = text
    path = write_result("density", res)
    print(text.replace("\nKEY", f"\nresults: {path}\nKEY"))
    return res


def _machine_at_start(log: Log) -> dict[str, Any]:
    """The machine, and its runsc processes and MemAvailable before anything starts."""
    mach = machine()
    mach.update({"nproc": os.cpu_count(), "meminfo_start": meminfo(), "disk": disk(Path("/tmp"))})
    start = {"runsc_processes": runsc_processes(), "mem_available": mem_available()}
    log(
        f"density: {mach['nproc']} cpus, MemTotal {mach['mem_bytes'] / GIB:.1f} GiB, "
        f"MemAvailable {start['mem_available'] / GIB:.1f} GiB, disk free {mach['disk']['free'] / 1e9:.0f} GB, "
        f"load {mach['load_at_start'][0]:.2f}; {start['runsc_processes']} runsc processes already on the machine"
    )
    return {"machine": mach, "start": start}


def _workers_stack(workers: int, keep: bool, log: Log, settle: float) -> tuple[stack_mod.Stack, dict[str, Any]]:
    """Start a stack with `workers` workers; MemAvailable before and after ready, the parts' memory."""
    before = mem_available()
    stack = stack_mod.start(workers=workers, keep=keep, log=log)
    time.sleep(settle)
    after = mem_available()
    cp = control_plane(stack)
    node = node_name(stack)
    return stack, {
        "workers": workers,
        "mem_available_before": before,
        "mem_available_after": after,
        "drop": before - after,
        "atelet": cp.get("atelet", {}),
        "control_plane": cp,
        "netns": len(netns_list(f"ate-{node}-")),
    }


def _measure(
    stack: stack_mod.Stack,
    names: list[str],
    idles: list[str],
    concurrency: int,
    cpu_seconds: float,
    settle: float,
    res: dict[str, Any],
    log: Log,
) -> None:
    """Phases 2 to 5 on the N-worker stack, in order; each adds its figures to `res`."""
    res["before_resume"] = _create_actors(stack, names + idles, settle, log)
    res.update(_resume_running(stack, names, concurrency, settle, log))
    res.update(_bare_and_idle_cpu(stack, cpu_seconds, settle, log))
    res["cpu_load"] = _request_cpu(stack, names, cpu_seconds, log)
    res.update(_make_idle(stack, names, idles, concurrency, settle, log))


def _root(stack: stack_mod.Stack) -> Path:
    """The atelet's runsc root: where ours run."""
    return stack.data_dir / "atelet" / "runsc"


def _create_actors(stack: stack_mod.Stack, actors: list[str], settle: float, log: Log) -> dict[str, Any]:
    """The template and every actor (SUSPENDED); then the baseline figures before any resume."""
    t = time.monotonic()
    setup(stack.api_url, stack.token, ATESPACE, actors, COUNTER, TEMPLATE)
    log(f"density: template + {len(actors)} actors created in {time.monotonic() - t:.1f} s")
    time.sleep(settle)
    return {
        "mem_available": mem_available(),
        "runsc_processes": runsc_processes(str(_root(stack))),
        "temporal_db": temporal_db(stack.data_dir),
        "db": asyncio.run(db_sizes(stack.dsn)),
    }


def _resume_running(
    stack: stack_mod.Stack, names: list[str], concurrency: int, settle: float, log: Log
) -> dict[str, Any]:
    """2. RUNNING: resume `names` through the API, one `GET /` each; what runs then.

    Raises:
        RuntimeError: The atelet's runsc root does not hold one sandbox per running actor.
    """
    root = _root(stack)
    t = time.monotonic()
    resume_s = summary(asyncio.run(run_verbs(stack.api_url, stack.token, names, ["resume"], concurrency)))
    counts = asyncio.run(get_each(stack.router_url, names))
    log(f"density: {len(names)} actors RUNNING in {time.monotonic() - t:.1f} s, memory_count {set(counts)}")
    time.sleep(settle)
    ours = sandboxes(root)
    running = {
        "mem_available": mem_available(),
        "sandboxes": len(ours),
        "runsc_processes": runsc_processes(str(root)),
        "control_plane": control_plane(stack),
        "memory_counts": counts,
    }
    if len(ours) != len(names):
        raise RuntimeError(f"{len(ours)} sandboxes under {root}, expected {len(names)}")
    return {"resume_s": resume_s, "running": running}


def _bare_and_idle_cpu(stack: stack_mod.Stack, cpu_seconds: float, settle: float, log: Log) -> dict[str, Any]:
    """3. The bare sandbox, while ours run; every sandbox measured in the same pass.

    4. CPU while nothing is sent to any sandbox: ours by kind of process, the bare one, the rest.
    The bare sandbox is removed at the end.
    """
    out: dict[str, Any] = {}
    bare = Bare(stack)
    try:
        out["bare_timing"] = asyncio.run(bare.start())
        time.sleep(settle)
        bare_sb = next(iter(sandboxes(bare.root).values()))
        ours = sandboxes(_root(stack))
        out["bare_sandbox"], out["ours_sandboxes"] = bare_sb, ours
        meter = CpuMeter(cpu_groups(stack, ours, bare_sb))
        meter.start()
        time.sleep(cpu_seconds)
        cpu = meter.stop()
        out["cpu_idle"] = {"seconds": meter.wall, "cpu_s": cpu, "loadavg": os.getloadavg()}
    finally:
        asyncio.run(bare.close())
    log("density: bare sandbox measured and removed")
    return out


def _request_cpu(stack: stack_mod.Stack, names: list[str], cpu_seconds: float, log: Log) -> dict[str, Any]:
    """4, continued. CPU while `GET /` requests go through the router to ours (8 in flight)."""
    meter = CpuMeter(cpu_groups(stack, sandboxes(_root(stack)), None))
    meter.start()
    load = asyncio.run(router_load(stack.router_url, names, cpu_seconds))
    cpu = meter.stop()
    figures = {"seconds": meter.wall, "cpu_s": cpu, "loadavg": os.getloadavg(), **load}
    log(f"density: load {load['requests']} requests in {meter.wall:.1f} s, {load['errors']} errors")
    return figures


def _make_idle(
    stack: stack_mod.Stack, names: list[str], idles: list[str], concurrency: int, settle: float, log: Log
) -> dict[str, Any]:
    """5. IDLE: suspend the running actors, resume and suspend every other once; then measure."""
    t = time.monotonic()
    suspend_s = summary(asyncio.run(run_verbs(stack.api_url, stack.token, names, ["suspend"], concurrency)))
    cycle_s = summary(asyncio.run(run_verbs(stack.api_url, stack.token, idles, ["resume", "suspend"], concurrency)))
    log(f"density: {len(names)} suspended, {len(idles)} resumed+suspended in {time.monotonic() - t:.1f} s")
    time.sleep(settle)
    return {"suspend_s": suspend_s, "cycle_s": cycle_s, "idle": _idle_figures(stack, names + idles)}


def _idle_figures(stack: stack_mod.Stack, actors: list[str]) -> dict[str, Any]:
    """What the idle actors hold: disk per actor (snapshot, node side), shared state, memory left."""
    root = _root(stack)
    snaps = stack.data_dir / "snapshots" / ATESPACE
    per_actor = {n: du(snaps / "actors" / n) for n in actors}
    atelet = stack.data_dir / "atelet"
    node_side = {
        n: {
            "actor_dir": du(atelet / "actors" / ATESPACE / n)["real"],
            "log": du(atelet / "logs" / ATESPACE / f"{n}.log")["real"],
        }
        for n in actors
    }
    return {
        "mem_available": mem_available(),
        "runsc_processes": runsc_processes(str(root)),
        "sandboxes": len(runsc_list(root)),
        "snapshot_real": [v["real"] for v in per_actor.values()],
        "snapshot_apparent": [v["apparent"] for v in per_actor.values()],
        "snapshot_files": [v["files"] for v in per_actor.values()],
        "node_actor_dir": [v["actor_dir"] for v in node_side.values()],
        "node_log": [v["log"] for v in node_side.values()],
        "golden": du(snaps / "templates" / TEMPLATE),
        "snapshot_root": du(stack.data_dir / "snapshots"),
        "local_snapshots": du(atelet / "local-snapshots"),
        "atelet_operations": du(atelet / "operations"),
        "atelet_state": du(atelet),
        "temporal_db": temporal_db(stack.data_dir),
        "postgres_dir": du(stack.data_dir / "postgres"),
        "db": asyncio.run(db_sizes(stack.dsn)),
        "control_plane": control_plane(stack),
    }
