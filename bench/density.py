"""Benchmark 5: density. How many RUNNING and idle counter actors one machine holds.

Two stacks in one run, both with real runsc (not hollow):

1. Workers (a worker is a network namespace + veth pair): max(N, 100) worker networks made with
   `atelet.netns` without a stack (kernel Slab+Percpu and MemAvailable deltas); then a stack with
   2 workers and one with N (one per RUNNING actor, `--workers N`): MemAvailable drop from just
   before each start to just after `ate: ready`, and the atelet's RSS/PSS.
2. RUNNING (second stack): the counter template (`examples/counter/template.yaml`, FULL scope)
   and N + M actors; N of them resumed through the REST API (a few at a time) and sent one
   `GET /` through the router. Then per running sandbox the PSS (from
   `/proc/<pid>/smaps_rollup`: shared pages split fairly among the processes mapping them) and
   the RSS, summed over that sandbox's processes (the runsc sandbox with its stub children, the
   gofer: every process naming the sandbox's bundle, found from `runsc list`), separately the
   atelet's `runsc wait` watcher of that sandbox, and the memory cgroup's usage when runsc made
   one per sandbox. System view: the drop in MemAvailable per running actor (noisy on a shared
   machine). Control-plane processes' RSS and PSS at that point.
3. Baseline, same run, while ours run: one bare counter sandbox restored with `runsc restore`
   from the same golden checkpoint, no control plane (`bench.activation.prepare_floor`: own
   namespace, bundle, runsc root), sent one `GET /` too; its PSS/RSS the same way.
   Ratio ours-per-sandbox / bare.
4. CPU: CPU of every process over an idle window (nothing sent), then over a window of `GET /`
   through the router round-robin over the running actors (8 in flight).
5. IDLE: the N running actors suspended, the M others resumed and suspended (each gets its own
   FULL snapshot). Disk per idle actor: its snapshot directory (real bytes: allocated blocks)
   plus what the node keeps for it (atelet actor dir, sandbox log); Postgres bytes per actor
   (`pg_total_relation_size` of actors + snapshots + operations over the actor count);
   MemAvailable and the runsc process count back near where they were before the resumes.

Estimates derived from these figures are labelled as such in the output.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from bench import stack as stack_mod
from bench.actors import COUNTER, call, setup
from bench.common import CpuMeter, Log, machine, summary, table, write_result

ATESPACE, TEMPLATE = "bench", "counter"
GIB, MIB = 2**30, 2**20
TARGET_MEM = 24 * GIB
"""The machine the issue asks about: 2 cores, 24 GiB."""
BARE_NODE, BARE_SUBNET = "atebench-density", "10.96.1.0/30"
NS_NODE, NS_SUBNET = "atebench-density-ns", "10.96.128.0/20"
"""Networks made directly (netns_cost): their own node name (names) and subnet (up to 1024)."""
CONTROL_PLANE = ("api-server", "worker", "router", "atelet", "temporal", "postgres")


# ---- /proc and disk ------------------------------------------------------------------------


def meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes."""
    out: dict[str, int] = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts:
                out[key] = int(parts[0]) * (1024 if len(parts) > 1 else 1)
    return out


def mem_available(samples: int = 5, interval: float = 0.2) -> int:
    """Median MemAvailable (bytes) of a few samples `interval` s apart (it moves with other work)."""
    values = []
    for i in range(samples):
        if i:
            time.sleep(interval)
        values.append(meminfo()["MemAvailable"])
    return int(statistics.median(values))


def smaps(pid: int) -> dict[str, int]:
    """Rss, Pss, Pss_Anon, Pss_File, Pss_Shmem, Swap of one process in bytes (empty when gone)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("Rss", "Pss", "Pss_Anon", "Pss_File", "Pss_Shmem", "Swap"):
                    out[key] = int(rest.split()[0]) * 1024
    except OSError:
        return {}
    return out


def mem_sum(pids: list[int]) -> dict[str, int]:
    """smaps_rollup figures summed over pids, lower-case keys, plus `n` (processes still there)."""
    total = {"rss": 0, "pss": 0, "pss_anon": 0, "pss_file": 0, "pss_shmem": 0, "swap": 0, "n": 0}
    for p in pids:
        s = smaps(p)
        if s:
            total["n"] += 1
            for k, v in s.items():
                total[k.lower()] += v
    return total


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _procs() -> tuple[dict[int, list[str]], dict[int, list[int]]]:
    """argv of every process and the children of every pid, in one pass over /proc."""
    argvs: dict[int, list[str]] = {}
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        children.setdefault(int(stat[stat.rfind(b")") + 2 :].split()[1]), []).append(pid)
        argvs[pid] = _argv(pid)
    return argvs, children


def _descendants(pids: set[int], children: dict[int, list[int]]) -> set[int]:
    out, todo = set(pids), list(pids)
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _kind(argv: list[str]) -> str:
    """sandbox | gofer | stub | wait | other, from a runsc process's argv (a systrap stub process,
    forked by the sandbox to run the application's threads, has an empty command line)."""
    if not argv:
        return "stub"
    head = os.path.basename(argv[0])
    if head == "runsc-sandbox" or "boot" in argv:
        return "sandbox"
    if head == "runsc-gofer" or "gofer" in argv:
        return "gofer"
    if "wait" in argv:
        return "wait"
    return "other"


def runsc_list(root: Path) -> list[dict[str, Any]]:
    """`runsc --root=<root> list -format=json` (empty when the root does not exist)."""
    if not root.exists():
        return []
    r = subprocess.run(["runsc", f"--root={root}", "list", "-format=json"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"runsc list --root={root}: {r.stderr.strip()}")
    data = json.loads(r.stdout or "[]")
    return data if isinstance(data, list) else []


def _cgroup_memory(pid: int, members: set[int]) -> dict[str, Any] | None:
    """The memory cgroup of pid (v1 `memory` or v2), its usage and whether only `members` are in it."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            base, usage_file = Path("/sys/fs/cgroup/memory") / path.lstrip("/"), "memory.usage_in_bytes"
            break
    else:
        v2 = [ln for ln in lines if ln.startswith("0::")]
        if not v2:
            return None
        base, usage_file = Path("/sys/fs/cgroup") / v2[0][3:].lstrip("/"), "memory.current"
    try:
        usage = int((base / usage_file).read_text())
        procs = {int(x) for x in (base / "cgroup.procs").read_text().split()}
    except (OSError, ValueError):
        return None
    return {"path": str(base), "usage": usage, "own": bool(procs) and procs <= members, "procs": len(procs)}


def sandboxes(root: Path) -> dict[str, dict[str, Any]]:
    """Every sandbox under a runsc root, by container ID: its processes by kind and their memory.

    A sandbox's own processes are its sandbox PID with its descendants (stub processes) and every
    process whose argv names its bundle (the gofer), with their descendants. `wait` processes
    (`runsc wait <cid>`, the atelet's exit watch) are kept apart: the control plane adds them.
    """
    containers = runsc_list(root)
    argvs, children = _procs()
    out: dict[str, dict[str, Any]] = {}
    for c in containers:
        cid, pid, bundle = c.get("id", ""), int(c.get("pid") or 0), c.get("bundle", "")
        named = {p for p, a in argvs.items() if bundle and any(x == bundle or x.endswith("=" + bundle) for x in a)}
        own = _descendants(named | ({pid} if pid > 0 else set()), children)
        waits = _descendants({p for p, a in argvs.items() if cid in a and "wait" in a and p not in own}, children)
        by_kind: dict[str, list[int]] = {}
        for p in own:
            by_kind.setdefault(_kind(argvs.get(p, [])), []).append(p)
        out[cid] = {
            "pid": pid,
            "status": c.get("status"),
            "pids": {k: sorted(v) for k, v in by_kind.items()},
            "argv": {k: " ".join(argvs.get(v[0], [])[:4])[:200] for k, v in by_kind.items()},
            "by_kind": {k: mem_sum(v) for k, v in by_kind.items()},
            "wait_pids": sorted(waits),
            "own": mem_sum(sorted(own)),
            "wait": mem_sum(sorted(waits)),
            "cgroup": _cgroup_memory(pid, own) if pid > 0 else None,
        }
    return out


def runsc_processes(marker: str | None = None) -> int:
    """How many processes run a runsc binary (whose argv contains `marker`, if given)."""
    argvs, _ = _procs()
    return sum(
        1
        for a in argvs.values()
        if a and os.path.basename(a[0]).startswith("runsc") and (marker is None or any(marker in x for x in a))
    )


def du(path: Path) -> dict[str, int]:
    """Real (allocated blocks) and apparent bytes, and files, under path; hard links once."""
    real = apparent = files = 0
    seen: set[tuple[int, int]] = set()
    if not path.exists():
        return {"real": 0, "apparent": 0, "files": 0}
    if not path.is_dir():
        st = path.lstat()
        return {"real": st.st_blocks * 512, "apparent": st.st_size, "files": 1}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in filenames + dirnames:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            real += st.st_blocks * 512
            if name in filenames:
                apparent += st.st_size
                files += 1
    return {"real": real, "apparent": apparent, "files": files}


def temporal_db(data_dir: Path) -> int:
    """Real bytes of the Temporal dev server's SQLite files (temporal.db and its -wal/-shm)."""
    return sum(du(f)["real"] for f in data_dir.glob("temporal.db*"))


def netns_list(prefix: str) -> list[str]:
    """Network namespaces whose name starts with prefix (`ip netns list`)."""
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return [line.split()[0] for line in r.stdout.splitlines() if line.split() and line.split()[0].startswith(prefix)]


def disk(path: Path) -> dict[str, int]:
    """Size, used and free bytes of the filesystem holding path."""
    u = shutil.disk_usage(path)
    return {"total": u.total, "used": u.used, "free": u.free}


# ---- the stack -----------------------------------------------------------------------------


def _node(stack: stack_mod.Stack) -> str:
    """The atelet's node name, from its ready line (it names the workers' namespaces)."""
    for line in stack.lines:
        m = re.search(r"\(node (\S+), subnet", line)
        if m:
            return m.group(1)
    raise RuntimeError("no atelet ready line with the node name")


def control_plane(stack: stack_mod.Stack) -> dict[str, dict[str, int]]:
    """RSS/PSS of every part but runsc, by part (postgres: all its processes)."""
    return {k: mem_sum(v) for k, v in stack.processes().items() if k != "runsc"}


def stop_and_check(stack: stack_mod.Stack, keep: bool, log: Log) -> dict[str, Any]:
    """Stops the stack, then checks that no sandbox, runsc process or namespace of it is left."""
    node = _node(stack) if any("(node " in line for line in stack.lines) else ""
    stack.keep = True
    stack.stop()
    root = stack.data_dir / "atelet" / "runsc"
    left = {
        "runsc_list": [c.get("id") for c in runsc_list(root)],
        "runsc_processes": runsc_processes(str(stack.data_dir)),
        "netns": netns_list(f"ate-{node}-") if node else [],
        "ate_dev_exit": stack.proc.returncode,
    }
    if not keep:
        shutil.rmtree(stack.data_dir, ignore_errors=True)
    clean = not (left["runsc_list"] or left["runsc_processes"] or left["netns"])
    log(f"density: stack stopped (exit {left['ate_dev_exit']}), {'clean' if clean else f'LEFT BEHIND: {left}'}")
    left["clean"] = clean
    return left


def _cpu_groups(
    stack: stack_mod.Stack, ours: dict[str, dict[str, Any]], bare: dict[str, Any] | None
) -> dict[str, list[int]]:
    """PIDs for CpuMeter: the stack's parts (runsc split by sandbox kind), the bare sandbox's."""
    groups = {k: v for k, v in stack.processes().items() if k not in ("ate-dev", "runsc")}
    for kind in ("sandbox", "gofer", "stub", "other"):
        groups[f"ours {kind}"] = [p for sb in ours.values() for p in sb["pids"].get(kind, [])]
    groups["ours runsc wait"] = [p for sb in ours.values() for p in sb["wait_pids"]]
    for kind, pids in (bare or {}).get("pids", {}).items():
        groups[f"bare {kind}"] = pids
    return groups


def netns_cost(count: int) -> dict[str, Any]:
    """Kernel memory of `count` worker networks made the atelet's way (`atelet.netns.create`: a
    namespace and a veth pair with addresses and a route each), without a stack: deltas of
    MemAvailable and of the kernel's own counters in /proc/meminfo, then everything deleted."""
    from atelet import netns

    nets = [netns.plan(NS_NODE, f"w-{i}", i, NS_SUBNET) for i in range(count)]
    fields = ("MemAvailable", "Slab", "SUnreclaim", "Percpu")

    async def create() -> None:
        for net in nets:
            await netns.create(net)

    async def destroy() -> None:
        for net in nets:
            await netns.destroy(net)

    before, avail = meminfo(), mem_available()
    try:
        asyncio.run(create())
        time.sleep(2.0)
        after, avail_after = meminfo(), mem_available()
    finally:
        asyncio.run(destroy())
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in fields}
    delta["MemAvailable"] = avail_after - avail
    return {
        "count": count,
        "delta": delta,
        "kernel_per_ns": (delta["Slab"] + delta["Percpu"]) / count,
        "left": netns_list(f"ate-{NS_NODE}-"),
    }


def _workers_stack(workers: int, keep: bool, log: Log, settle: float) -> tuple[stack_mod.Stack, dict[str, Any]]:
    """Start a stack with `workers` workers; MemAvailable before and after ready, the parts' memory."""
    before = mem_available()
    stack = stack_mod.start(workers=workers, keep=keep, log=log)
    time.sleep(settle)
    after = mem_available()
    cp = control_plane(stack)
    node = _node(stack)
    return stack, {
        "workers": workers,
        "mem_available_before": before,
        "mem_available_after": after,
        "drop": before - after,
        "atelet": cp.get("atelet", {}),
        "control_plane": cp,
        "netns": len(netns_list(f"ate-{node}-")),
    }


async def _each(names: list[str], concurrency: int, fn: Any) -> list[float]:
    """Runs `await fn(name)` for every name, `concurrency` at a time; seconds each."""
    sem = asyncio.Semaphore(concurrency)

    async def one(name: str) -> float:
        async with sem:
            t = time.monotonic()
            await fn(name)
            return time.monotonic() - t

    return list(await asyncio.gather(*(one(n) for n in names)))


async def _verbs(api_url: str, names: list[str], verbs: list[str], concurrency: int) -> list[float]:
    """Each actor through the REST API: the verbs in order (e.g. resume then suspend); a resume that
    finds no free worker (NoCapacity) is retried."""
    async with httpx.AsyncClient(base_url=api_url, timeout=300) as api:

        async def go(name: str) -> None:
            for verb in verbs:
                for attempt in range(20):
                    try:
                        await call(api, verb, ATESPACE, name)
                        break
                    except RuntimeError as exc:  # a worker freed by a suspend a moment ago: try again
                        if "NoCapacity" not in str(exc) or attempt == 19:
                            raise
                        await asyncio.sleep(0.5)

        return await _each(names, concurrency, go)


async def _get_each(router_url: str, names: list[str]) -> list[int]:
    """One `GET /` through the router per actor; their memory_count."""
    async with httpx.AsyncClient(base_url=router_url, timeout=60) as client:
        counts = []
        for name in names:
            r = await client.get("/", headers={"ate-target-actor": f"{ATESPACE}/{name}"})
            if r.status_code != 200:
                raise RuntimeError(f"GET / of {name}: HTTP {r.status_code} {r.text[:200]}")
            counts.append(int(r.json()["memory_count"]))
        return counts


async def _load(router_url: str, names: list[str], seconds: float, concurrency: int = 8) -> dict[str, Any]:
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


async def _golden(dsn: str) -> tuple[str, dict[str, Any]]:
    """The template's golden snapshot URI and spec, from Postgres."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(
            "SELECT s.uri, t.spec FROM actor_templates t JOIN snapshots s ON s.id = t.golden_snapshot_id "
            "WHERE t.atespace = $1 AND t.name = $2",
            ATESPACE,
            TEMPLATE,
        )
    finally:
        await conn.close()
    return row["uri"], json.loads(row["spec"])


async def _db_sizes(dsn: str) -> dict[str, Any]:
    """Actor count, and rows and total bytes (heap, indexes, TOAST) of the per-actor tables."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        actors = await conn.fetchval("SELECT count(*) FROM actors")
        tables = {}
        for t in ("actors", "snapshots", "operations", "placements", "workers", "actor_templates"):
            tables[t] = {
                "rows": await conn.fetchval(f"SELECT count(*) FROM {t}"),
                "bytes": await conn.fetchval("SELECT pg_total_relation_size($1::regclass)", t),
                "tuple_bytes": float(await conn.fetchval(f"SELECT coalesce(avg(pg_column_size(x.*)), 0) FROM {t} x")),
            }
        database = await conn.fetchval("SELECT pg_database_size(current_database())")
    finally:
        await conn.close()
    per_actor = sum(tables[t]["bytes"] for t in ("actors", "snapshots", "operations")) / max(actors, 1)
    return {"actors": actors, "tables": tables, "database_bytes": database, "bytes_per_actor": per_actor}


class Bare:
    """One counter sandbox restored with `runsc restore` from the golden checkpoint, no control plane."""

    def __init__(self, stack: stack_mod.Stack) -> None:
        self.stack = stack
        self.floor: Any = None

    async def start(self) -> dict[str, float]:
        """Prepare namespace + bundle, restore, wait until `/readyz` answers, then one `GET /`."""
        from activities.atelet import workload_spec
        from atelet import netns, probe
        from atelet.snapshots import CHECKPOINT_DIR, SnapshotStore
        from bench.activation import prepare_floor
        from domain.templates import ActorTemplateSpec

        uri, spec = await _golden(self.stack.dsn)
        wspec = workload_spec(ActorTemplateSpec.from_document(spec))
        dest = SnapshotStore([self.stack.data_dir / "snapshots"]).resolve(uri)
        self.floor = f = await prepare_floor(
            self.stack, wspec, dest, node=BARE_NODE, subnet=BARE_SUBNET, hostname="bare"
        )
        await netns.ensure(f.net)
        t0 = time.monotonic()
        await f.runsc.restore("density-bare", f.bundle, dest / CHECKPOINT_DIR, f.work / "bare.log")
        t1 = time.monotonic()
        while await probe.http_status(f.net.worker_ip, f.port, "/readyz") != 200:
            await asyncio.sleep(0.005)
        t2 = time.monotonic()
        async with httpx.AsyncClient(timeout=30) as client:
            r = await client.get(f"http://{f.net.worker_ip}:{f.port}/")
            r.raise_for_status()
        return {"restore_s": t1 - t0, "ready_s": t2 - t1}

    @property
    def root(self) -> Path:
        """Its runsc root."""
        return Path(self.floor.runsc.root)

    async def close(self) -> None:
        """Delete the sandbox, the namespace and the work dir."""
        if self.floor is not None:
            await self.floor.close()


# ---- the run -------------------------------------------------------------------------------


def _mib(b: float) -> float:
    return b / MIB


def _stat(values: list[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(values) if values else float("nan"),
        "p50": statistics.median(values) if values else float("nan"),
        "min": min(values) if values else float("nan"),
        "max": max(values) if values else float("nan"),
    }


def run(
    running: int = 30,
    idle: int = 200,
    concurrency: int = 4,
    cpu_seconds: float = 20.0,
    keep: bool = False,
    log: Log = print,
) -> dict[str, Any]:
    """The whole benchmark (see the module docstring); prints the table, writes results JSON."""
    settle = 5.0
    concurrency = max(1, min(concurrency, running))  # one worker per resume in flight
    res: dict[str, Any] = {"benchmark": "density", "n_running": running, "n_idle": idle, "concurrency": concurrency}
    mach = machine()
    mach.update({"nproc": os.cpu_count(), "meminfo_start": meminfo(), "disk": disk(Path("/tmp"))})
    res["machine"] = mach
    res["start"] = {"runsc_processes": runsc_processes(), "mem_available": mem_available()}
    log(
        f"density: {mach['nproc']} cpus, MemTotal {mach['mem_bytes'] / GIB:.1f} GiB, "
        f"MemAvailable {res['start']['mem_available'] / GIB:.1f} GiB, disk free {mach['disk']['free'] / 1e9:.0f} GB, "
        f"load {mach['load_at_start'][0]:.2f}; {res['start']['runsc_processes']} runsc processes already on the machine"
    )

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
        text = _report(res)
    except Exception:
        write_result("density", res)  # the raw figures, for a report that failed
        raise
    res["text"] = text
    path = write_result("density", res)
    print(text.replace("\nKEY", f"\nresults: {path}\nKEY"))
    return res


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
    root = stack.data_dir / "atelet" / "runsc"
    t = time.monotonic()
    setup(stack.api_url, ATESPACE, names + idles, COUNTER, TEMPLATE)
    log(f"density: template + {len(names) + len(idles)} actors created in {time.monotonic() - t:.1f} s")
    time.sleep(settle)
    res["before_resume"] = {
        "mem_available": mem_available(),
        "runsc_processes": runsc_processes(str(root)),
        "temporal_db": temporal_db(stack.data_dir),
        "db": asyncio.run(_db_sizes(stack.dsn)),
    }

    # 2. RUNNING
    t = time.monotonic()
    res["resume_s"] = summary(asyncio.run(_verbs(stack.api_url, names, ["resume"], concurrency)))
    counts = asyncio.run(_get_each(stack.router_url, names))
    log(f"density: {len(names)} actors RUNNING in {time.monotonic() - t:.1f} s, memory_count {set(counts)}")
    time.sleep(settle)
    ours = sandboxes(root)
    res["running"] = {
        "mem_available": mem_available(),
        "sandboxes": len(ours),
        "runsc_processes": runsc_processes(str(root)),
        "control_plane": control_plane(stack),
        "memory_counts": counts,
    }
    if len(ours) != len(names):
        raise RuntimeError(f"{len(ours)} sandboxes under {root}, expected {len(names)}")

    # 3. the bare sandbox, while ours run; every sandbox measured in the same pass
    bare = Bare(stack)
    try:
        res["bare_timing"] = asyncio.run(bare.start())
        time.sleep(settle)
        bare_sb = next(iter(sandboxes(bare.root).values()))
        ours = sandboxes(root)
        res["bare_sandbox"], res["ours_sandboxes"] = bare_sb, ours
        # 4. CPU while nothing is sent to any sandbox: ours by kind of process, the bare one, the rest
        meter = CpuMeter(_cpu_groups(stack, ours, bare_sb))
        meter.start()
        time.sleep(cpu_seconds)
        cpu = meter.stop()
        res["cpu_idle"] = {"seconds": meter.wall, "cpu_s": cpu, "loadavg": os.getloadavg()}
    finally:
        asyncio.run(bare.close())
    log("density: bare sandbox measured and removed")

    # ... then while `GET /` requests go through the router to ours
    meter = CpuMeter(_cpu_groups(stack, sandboxes(root), None))
    meter.start()
    load = asyncio.run(_load(stack.router_url, names, cpu_seconds))
    cpu = meter.stop()
    res["cpu_load"] = {"seconds": meter.wall, "cpu_s": cpu, "loadavg": os.getloadavg(), **load}
    log(f"density: load {load['requests']} requests in {meter.wall:.1f} s, {load['errors']} errors")

    # 5. IDLE
    t = time.monotonic()
    res["suspend_s"] = summary(asyncio.run(_verbs(stack.api_url, names, ["suspend"], concurrency)))
    res["cycle_s"] = summary(asyncio.run(_verbs(stack.api_url, idles, ["resume", "suspend"], concurrency)))
    log(f"density: {len(names)} suspended, {len(idles)} resumed+suspended in {time.monotonic() - t:.1f} s")
    time.sleep(settle)
    snaps = stack.data_dir / "snapshots" / ATESPACE
    per_actor = {n: du(snaps / "actors" / n) for n in names + idles}
    atelet = stack.data_dir / "atelet"
    node_side = {
        n: {
            "actor_dir": du(atelet / "actors" / ATESPACE / n)["real"],
            "log": du(atelet / "logs" / ATESPACE / f"{n}.log")["real"],
        }
        for n in names + idles
    }
    res["idle"] = {
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
        "db": asyncio.run(_db_sizes(stack.dsn)),
        "control_plane": control_plane(stack),
    }


def _sum_kinds(sb: dict[str, Any], key: str, kinds: tuple[str, ...]) -> int:
    return sum(int(sb["by_kind"].get(k, {}).get(key, 0)) for k in kinds)


def _report(res: dict[str, Any]) -> str:
    """The text of the run: tables, then labelled estimates, then the KEY line."""
    n, m = res["n_running"], res["n_idle"]
    mach = res["machine"]
    cores = mach["nproc"] or 2
    ours = list(res["ours_sandboxes"].values())
    bare = res["bare_sandbox"]
    kinds = ("sandbox", "gofer", "stub", "other")

    def row(what: str, values: list[float], bare_value: float | None = None, scale: float = MIB) -> list[Any]:
        st = _stat(values)
        return [
            what,
            *(st[k] / scale for k in ("mean", "p50", "min", "max")),
            bare_value / scale if bare_value is not None else "-",
            f"{st['mean'] / bare_value:.2f}" if bare_value else "-",
        ]

    own_pss = [float(sb["own"]["pss"]) for sb in ours]
    wait_pss = [float(sb["wait"]["pss"]) for sb in ours]
    all_pss = [a + b for a, b in zip(own_pss, wait_pss, strict=True)]
    bare_pss = float(bare["own"]["pss"])
    mem_rows = []
    for kind in kinds:
        if any(kind in sb["by_kind"] for sb in ours) or kind in bare["by_kind"]:
            count = statistics.median([len(sb["pids"].get(kind, [])) for sb in ours])
            label = {"sandbox": "runsc sandbox (Sentry)", "stub": "systrap stubs"}.get(kind, kind)
            mem_rows.append(
                row(
                    f"PSS {label} ({count:g} proc.)",
                    [_sum_kinds(sb, "pss", (kind,)) for sb in ours],
                    _sum_kinds(bare, "pss", (kind,)),
                )
            )
    mem_rows.append(row("PSS sandbox's own processes", own_pss, bare_pss))
    mem_rows.append(row("PSS atelet's `runsc wait` (exit watch)", wait_pss, 0.0))
    mem_rows.append(row("PSS per sandbox, in all", all_pss, bare_pss))
    mem_rows.append(row("RSS sandbox's own processes", [sb["own"]["rss"] for sb in ours], bare["own"]["rss"]))
    mem_rows.append(row("RSS atelet's `runsc wait`", [sb["wait"]["rss"] for sb in ours], 0.0))
    cg = [sb["cgroup"]["usage"] for sb in ours if sb.get("cgroup") and sb["cgroup"]["own"]]
    if cg:
        bare_cg = bare["cgroup"]["usage"] if bare.get("cgroup") and bare["cgroup"]["own"] else None
        mem_rows.append(row("memory cgroup usage (kernel's charge)", cg, bare_cg))
    drop = (res["before_resume"]["mem_available"] - res["running"]["mem_available"]) / n
    mem_rows.append(["MemAvailable drop per RUNNING actor", _mib(drop), "", "", "", "-", "-"])
    by_page = {k: statistics.fmean([sb["own"][k] for sb in ours]) for k in ("pss_anon", "pss_shmem", "pss_file")}

    # workers
    w2, wn, nd = res["workers_2"], res["workers_n"], res["netns_direct"]
    extra = max(wn["workers"] - 2, 1)
    per_worker = (wn["drop"] - w2["drop"]) / extra
    atelet_rss_per_worker = (wn["atelet"].get("rss", 0) - w2["atelet"].get("rss", 0)) / extra
    worker_rows = [
        [
            f"ate dev --workers {w['workers']}",
            w["netns"],
            _mib(w["drop"]),
            _mib(w["atelet"].get("rss", 0)),
            _mib(w["atelet"].get("pss", 0)),
            _mib(sum(v.get("rss", 0) for k, v in w["control_plane"].items() if k in CONTROL_PLANE)),
        ]
        for w in (w2, wn)
    ]

    # control plane
    cp = res["running"]["control_plane"]
    cp_rss = sum(cp.get(k, {}).get("rss", 0) for k in CONTROL_PLANE)
    cp_pss = sum(cp.get(k, {}).get("pss", 0) for k in CONTROL_PLANE)
    cp_rows = [[k, _mib(cp.get(k, {}).get("rss", 0)), _mib(cp.get(k, {}).get("pss", 0))] for k in CONTROL_PLANE]
    cp_rows.append(["control plane (the six above)", _mib(cp_rss), _mib(cp_pss)])
    dev = cp.get("ate-dev", {})
    cp_rows.append(["ate dev supervisor (not in production)", _mib(dev.get("rss", 0)), _mib(dev.get("pss", 0))])

    # CPU
    ci, cl = res["cpu_idle"], res["cpu_load"]
    idle_rate = {k: v / ci["seconds"] for k, v in ci["cpu_s"].items()}
    load_rate = {k: v / cl["seconds"] for k, v in cl["cpu_s"].items()}
    ours_groups = [f"ours {k}" for k in kinds]
    cpu_rows = []

    def cpu_row(what: str, groups: list[str], per: float) -> list[Any]:
        i = sum(idle_rate.get(g, 0.0) for g in groups) / per
        lo = sum(load_rate.get(g, 0.0) for g in groups) / per
        return [what, 100 * i, 100 * lo]

    cpu_rows.append(cpu_row("ours: sandbox + gofer + stubs, per sandbox", ours_groups, n))
    cpu_rows.append(cpu_row("ours: atelet's `runsc wait`, per sandbox", ["ours runsc wait"], n))
    cpu_rows.append(cpu_row("ours: atelet process, per running sandbox", ["atelet"], n))
    bare_groups = [g for g in idle_rate if g.startswith("bare ")]
    cpu_rows.append([*cpu_row("bare sandbox (idle window only)", bare_groups, 1)[:2], "-"])
    for part in ("router", "api-server", "worker", "temporal", "postgres"):
        cpu_rows.append(cpu_row(f"{part} (whole process)", [part], 1))
    everything = [g for g in ci["cpu_s"] if not g.startswith("bare ")]
    cpu_rows.append(cpu_row("everything of the stack", everything, 1))
    reqs = max(cl["requests"], 1)
    rps = cl["requests"] / cl["seconds"]
    net_ms = {
        g: 1000 * max(cl["cpu_s"].get(g, 0.0) - idle_rate.get(g, 0.0) * cl["seconds"], 0.0) / reqs for g in everything
    }
    per_req = sum(net_ms.values())
    idle_per_sandbox = (
        sum(idle_rate.get(g, 0.0) for g in [*ours_groups, "ours runsc wait", "atelet"]) / n
    )  # fraction of a core
    bare_idle = sum(idle_rate.get(g, 0.0) for g in bare_groups)

    # idle actors
    idle = res["idle"]
    snap_real = [float(x) for x in idle["snapshot_real"]]
    node_bytes = [float(a + b) for a, b in zip(idle["node_actor_dir"], idle["node_log"], strict=True)]
    per_idle_disk = statistics.fmean(snap_real) + statistics.fmean(node_bytes)
    db, db0 = idle["db"], res["before_resume"]["db"]
    tables = db["tables"]
    ops = tables["operations"]["rows"]
    temporal_growth = idle["temporal_db"] - res["before_resume"]["temporal_db"]
    aops = idle["atelet_operations"]
    db_rows = [
        [t, tables[t]["rows"], tables[t]["bytes"] / 1e3, tables[t]["tuple_bytes"], db0["tables"][t]["rows"]]
        for t in ("actors", "snapshots", "operations")
    ]

    # estimates
    per_sandbox = statistics.fmean(all_pss)
    est_mem = (TARGET_MEM - cp_rss) / per_sandbox
    est_mem_drop = (TARGET_MEM - cp_rss) / drop if drop > 0 else float("nan")
    est_bare = (TARGET_MEM - cp_rss) / bare_pss
    est_cpu = 2 / idle_per_sandbox if idle_per_sandbox > 0 else float("inf")
    est_idle_per_gb = 1e9 / per_idle_disk
    free = mach["disk"]["free"]

    lines = [
        f"density: {n} RUNNING counters (real runsc, FULL scope), {n + m} idle actors; machine {cores} cpus, "
        f"MemTotal {mach['mem_bytes'] / GIB:.1f} GiB, {free / 1e9:.0f} GB disk free, load {mach['load_at_start'][0]:.2f}"
        " at start (shared machine)",
        "",
        f"memory per RUNNING sandbox (MiB; ours: {len(ours)} sandboxes; bare: one `runsc restore` of the same "
        "golden checkpoint, no control plane, measured in the same pass)",
        table(["what", "mean", "p50", "min", "max", "bare", "ours/bare"], mem_rows),
        f"PSS of a sandbox's own processes by kind of page (MiB, mean): anon {_mib(by_page['pss_anon']):.1f}, "
        f"shmem (gVisor memory file) {_mib(by_page['pss_shmem']):.1f}, file (runsc binary) "
        f"{_mib(by_page['pss_file']):.1f}; resume {res['resume_s']['p50'] * 1000:.0f} ms p50 "
        f"({res['concurrency']} at a time), bare restore {res['bare_timing']['restore_s'] * 1000:.0f} ms",
        "",
        "idle workers (a network namespace + veth pair each); MemAvailable drop from before start to ready (MiB)",
        table(["stack", "netns", "MemAvail drop", "atelet RSS", "atelet PSS", "control plane RSS"], worker_rows),
        f"per extra worker between the two stacks: MemAvailable {_mib(per_worker):+.2f} MiB (noisy: the whole "
        f"stack's start is in it), atelet RSS {atelet_rss_per_worker / 1024:+.0f} KiB; {nd['count']} worker "
        f"networks made directly (atelet.netns, no stack): kernel Slab+Percpu {nd['kernel_per_ns'] / 1024:.0f} KiB "
        f"each (MemAvailable drop {-nd['delta']['MemAvailable'] / nd['count'] / 1024:.0f} KiB each, noisy)",
        "",
        f"control plane with {n} RUNNING actors (MiB; postgres: all its processes, RSS counts shared buffers per "
        "process)",
        table(["process", "RSS", "PSS"], cp_rows),
        "",
        f"CPU, % of one core: idle window {ci['seconds']:.0f} s (nothing sent, bare sandbox running too), request "
        f"window {cl['seconds']:.0f} s (`GET /` through the router round-robin over the {n} actors, 8 in flight)",
        table(["what", "idle", "requests"], cpu_rows),
        f"requests: {cl['requests']} ({rps:.0f}/s, {cl['errors']} errors, p50 {cl['latency']['p50'] * 1000:.1f} ms, "
        f"p95 {cl['latency']['p95'] * 1000:.1f} ms); CPU ms per request net of the idle rate: "
        + ", ".join(f"{k} {v:.2f}" for k, v in sorted(net_ms.items()) if v >= 0.005)
        + f" (total {per_req:.2f})",
        "",
        f"idle actors: {n + m}, each resumed and suspended once (one FULL snapshot each); resume+suspend "
        f"{res['cycle_s']['p50'] * 1000:.0f} ms p50",
        table(
            ["disk per idle actor (KB)", "mean", "p50", "min", "max"],
            [
                row("snapshot dir, real bytes", snap_real, None, 1e3)[:5],
                row("  of those that served requests", snap_real[:n], None, 1e3)[:5],
                row("  of those resumed + suspended only", snap_real[n:], None, 1e3)[:5],
                row("snapshot dir, apparent bytes", idle["snapshot_apparent"], None, 1e3)[:5],
                row("node: atelet actor dir + sandbox log", node_bytes, None, 1e3)[:5],
            ],
        ),
        f"shared: golden snapshot {idle['golden']['real'] / 1e3:.0f} KB. Per operation, not per actor (no pruning "
        f"seen): atelet operation records {aops['files']} files = {aops['real'] / 1e3:.0f} KB "
        f"({aops['real'] / max(aops['files'], 1):.0f} B each), Temporal db +{temporal_growth / 1e3:.0f} KB "
        f"over {2 * (n + m)} resume/suspend workflows",
        "Postgres (bytes: total relation size incl. indexes and TOAST; tuple: mean pg_column_size of a row)",
        table(["table", "rows", "KB", "tuple B", "rows before resumes"], db_rows),
        f"= {db['bytes_per_actor']:.0f} bytes per actor for actors+snapshots+operations at {db['actors']} actors "
        f"(before the resumes: {db0['bytes_per_actor']:.0f}; small tables round up to 8 KiB pages); operations "
        f"grow by 2 rows per resume+suspend ({ops} rows)",
        f"after suspending: {idle['sandboxes']} sandboxes, {idle['runsc_processes']} runsc processes of the stack; "
        f"MemAvailable {_mib(idle['mem_available']):.0f} MiB vs {_mib(res['before_resume']['mem_available']):.0f} "
        f"before the resumes ({_mib(idle['mem_available'] - res['before_resume']['mem_available']):+.0f}; noisy)",
        "",
        "ESTIMATES (derived from the figures above; not run at that scale):",
        f"- memory: (24 GiB - control plane RSS {_mib(cp_rss):.0f} MiB) / PSS per sandbox {_mib(per_sandbox):.1f} "
        f"MiB = ~{est_mem:.0f} RUNNING counters (by the MemAvailable drop per actor, {_mib(drop):.1f} MiB: "
        f"~{est_mem_drop:.0f}); bare sandboxes by the same formula: ~{est_bare:.0f}. Each needs a worker (one "
        "place each by default; the atelet allows up to 1000 per node).",
        f"- CPU: an idle RUNNING counter costs {100 * idle_per_sandbox:.2f}% of a core (bare: {100 * bare_idle:.2f}%), "
        f"so ~{est_cpu:.0f} idle RUNNING counters would keep 2 cores busy doing nothing; requests: "
        f"{per_req:.2f} CPU ms each through the router -> ~{cores * 1000 / per_req:.0f}/s on {cores} idle cores.",
        f"- idle actors: ~{est_idle_per_gb:.0f} per GB of disk ({per_idle_disk / 1e3:.0f} KB each), "
        f"~{free / per_idle_disk / 1e6:.2f} million in this machine's {free / 1e9:.0f} GB free; Postgres "
        f"~{db['bytes_per_actor']:.0f} B per actor here (scale benchmark: resume unchanged at 10^6 rows); "
        "no memory, no process.",
    ]
    lines.append(
        f"KEY density: RUNNING PSS {_mib(per_sandbox):.1f} MiB/sandbox (own {_mib(statistics.fmean(own_pss)):.1f}"
        f" + runsc wait {_mib(statistics.fmean(wait_pss)):.1f}) vs bare {_mib(bare_pss):.1f} = "
        f"{per_sandbox / bare_pss:.2f}x; MemAvailable -{_mib(drop):.1f} MiB/actor; control plane RSS "
        f"{_mib(cp_rss):.0f} MiB; idle CPU {100 * idle_per_sandbox:.1f}%/sandbox (bare {100 * bare_idle:.1f}%);"
        f" est. ~{est_mem:.0f} RUNNING per 24 GiB by memory, ~{est_cpu:.0f} by idle CPU on 2 cores;"
        f" idle {per_idle_disk / 1e3:.0f} KB disk -> est. ~{est_idle_per_gb:.0f} idle per GB;"
        f" worker network {nd['kernel_per_ns'] / 1024:.0f} KiB kernel"
    )
    return "\n".join(lines)
