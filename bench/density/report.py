"""The text of a density run: its tables, the labelled estimates, and the KEY line.

`report` takes the results dict of `bench.density.benchmark.run`. The numbers more than one part
of the text uses (PSS per sandbox, control-plane RSS, CPU rates, disk per idle actor, the
estimates) are derived once, in `_figures`; each section then only formats.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from bench.common import table
from bench.density.memory import GIB, MIB
from bench.density.sandboxes import KINDS

TARGET_MEM = 24 * GIB
"""The machine the issue asks about: 2 cores, 24 GiB."""
CONTROL_PLANE = ("api-server", "worker", "router", "atelet", "temporal", "postgres")


def report(res: dict[str, Any]) -> str:
    """The text of the run: tables, then labelled estimates, then the KEY line."""
    f = _figures(res)
    lines = [
        *_header(res, f),
        *_memory_section(res, f),
        *_workers_section(res),
        *_control_plane_section(res, f),
        *_cpu_section(res, f),
        *_idle_section(res, f),
        *_estimates(res, f),
    ]
    lines.append(_key_line(res, f))
    return "\n".join(lines)


# ---- the figures ---------------------------------------------------------------------------


def _mib(b: float) -> float:
    return b / MIB


def _stat(values: list[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(values) if values else float("nan"),
        "p50": statistics.median(values) if values else float("nan"),
        "min": min(values) if values else float("nan"),
        "max": max(values) if values else float("nan"),
    }


def _sum_kinds(sb: dict[str, Any], key: str, kinds: tuple[str, ...]) -> int:
    return sum(int(sb["by_kind"].get(k, {}).get(key, 0)) for k in kinds)


@dataclass(frozen=True)
class _Cpu:
    """CPU rates (seconds per second, by process group) of the idle and the request window."""

    idle_rate: dict[str, float]
    load_rate: dict[str, float]
    ours_groups: list[str]
    """Our sandboxes' own processes, by kind."""
    bare_groups: list[str]
    everything: list[str]
    """Every group of the stack (not the bare sandbox)."""
    net_ms: dict[str, float]
    """CPU ms per request net of the idle rate, by group."""
    per_req: float
    idle_per_sandbox: float
    """Fraction of a core one idle RUNNING sandbox costs, the atelet's share and `runsc wait` included."""
    bare_idle: float

    def row(self, what: str, groups: list[str], per: float) -> list[Any]:
        """`what`, then % of one core of `groups` per `per` in the idle and the request window."""
        i = sum(self.idle_rate.get(g, 0.0) for g in groups) / per
        lo = sum(self.load_rate.get(g, 0.0) for g in groups) / per
        return [what, 100 * i, 100 * lo]


@dataclass(frozen=True)
class _Figures:
    """The numbers derived from the results that more than one part of the text uses."""

    n: int
    m: int
    cores: int
    free: int
    """Bytes free on the disk at the start."""
    own_pss: list[float]
    wait_pss: list[float]
    all_pss: list[float]
    bare_pss: float
    per_sandbox: float
    """Mean PSS of one of our sandboxes, its `runsc wait` included."""
    drop: float
    """MemAvailable drop per RUNNING actor."""
    cp_rss: float
    cpu: _Cpu
    snap_real: list[float]
    node_bytes: list[float]
    per_idle_disk: float
    est_mem: float
    est_mem_drop: float
    est_bare: float
    est_cpu: float
    est_idle_per_gb: float


def _cpu_figures(res: dict[str, Any], n: int) -> _Cpu:
    ci, cl = res["cpu_idle"], res["cpu_load"]
    idle_rate = {k: v / ci["seconds"] for k, v in ci["cpu_s"].items()}
    load_rate = {k: v / cl["seconds"] for k, v in cl["cpu_s"].items()}
    ours_groups = [f"ours {k}" for k in KINDS]
    bare_groups = [g for g in idle_rate if g.startswith("bare ")]
    everything = [g for g in ci["cpu_s"] if not g.startswith("bare ")]
    reqs = max(cl["requests"], 1)
    net_ms = {
        g: 1000 * max(cl["cpu_s"].get(g, 0.0) - idle_rate.get(g, 0.0) * cl["seconds"], 0.0) / reqs for g in everything
    }
    idle_per_sandbox = (
        sum(idle_rate.get(g, 0.0) for g in [*ours_groups, "ours runsc wait", "atelet"]) / n
    )  # fraction of a core
    return _Cpu(
        idle_rate=idle_rate,
        load_rate=load_rate,
        ours_groups=ours_groups,
        bare_groups=bare_groups,
        everything=everything,
        net_ms=net_ms,
        per_req=sum(net_ms.values()),
        idle_per_sandbox=idle_per_sandbox,
        bare_idle=sum(idle_rate.get(g, 0.0) for g in bare_groups),
    )


def _figures(res: dict[str, Any]) -> _Figures:
    n = res["n_running"]
    ours = list(res["ours_sandboxes"].values())
    own_pss = [float(sb["own"]["pss"]) for sb in ours]
    wait_pss = [float(sb["wait"]["pss"]) for sb in ours]
    all_pss = [a + b for a, b in zip(own_pss, wait_pss, strict=True)]
    bare_pss = float(res["bare_sandbox"]["own"]["pss"])
    drop = (res["before_resume"]["mem_available"] - res["running"]["mem_available"]) / n
    cp = res["running"]["control_plane"]
    cp_rss = sum(cp.get(k, {}).get("rss", 0) for k in CONTROL_PLANE)
    cpu = _cpu_figures(res, n)
    idle = res["idle"]
    snap_real = [float(x) for x in idle["snapshot_real"]]
    node_bytes = [float(a + b) for a, b in zip(idle["node_actor_dir"], idle["node_log"], strict=True)]
    per_idle_disk = statistics.fmean(snap_real) + statistics.fmean(node_bytes)
    per_sandbox = statistics.fmean(all_pss)
    return _Figures(
        n=n,
        m=res["n_idle"],
        cores=res["machine"]["nproc"] or 2,
        free=res["machine"]["disk"]["free"],
        own_pss=own_pss,
        wait_pss=wait_pss,
        all_pss=all_pss,
        bare_pss=bare_pss,
        per_sandbox=per_sandbox,
        drop=drop,
        cp_rss=cp_rss,
        cpu=cpu,
        snap_real=snap_real,
        node_bytes=node_bytes,
        per_idle_disk=per_idle_disk,
        est_mem=(TARGET_MEM - cp_rss) / per_sandbox,
        est_mem_drop=(TARGET_MEM - cp_rss) / drop if drop > 0 else float("nan"),
        est_bare=(TARGET_MEM - cp_rss) / bare_pss,
        est_cpu=2 / cpu.idle_per_sandbox if cpu.idle_per_sandbox > 0 else float("inf"),
        est_idle_per_gb=1e9 / per_idle_disk,
    )


# ---- the sections --------------------------------------------------------------------------


def _row(what: str, values: list[float], bare_value: float | None = None, scale: float = MIB) -> list[Any]:
    """`what`, mean, p50, min and max of `values` over `scale`, then the bare value and ours/bare."""
    st = _stat(values)
    return [
        what,
        *(st[k] / scale for k in ("mean", "p50", "min", "max")),
        bare_value / scale if bare_value is not None else "-",
        f"{st['mean'] / bare_value:.2f}" if bare_value else "-",
    ]


def _header(res: dict[str, Any], f: _Figures) -> list[str]:
    mach = res["machine"]
    return [
        f"density: {f.n} RUNNING counters (real runsc, FULL scope), {f.n + f.m} idle actors; machine {f.cores} cpus, "
        f"MemTotal {mach['mem_bytes'] / GIB:.1f} GiB, {f.free / 1e9:.0f} GB disk free, load {mach['load_at_start'][0]:.2f}"
        " at start (shared machine)",
        "",
    ]


def _memory_rows(res: dict[str, Any], f: _Figures) -> list[list[Any]]:
    ours = list(res["ours_sandboxes"].values())
    bare = res["bare_sandbox"]
    rows = []
    for kind in KINDS:
        if any(kind in sb["by_kind"] for sb in ours) or kind in bare["by_kind"]:
            count = statistics.median([len(sb["pids"].get(kind, [])) for sb in ours])
            label = {"sandbox": "runsc sandbox (Sentry)", "stub": "systrap stubs"}.get(kind, kind)
            rows.append(
                _row(
                    f"PSS {label} ({count:g} proc.)",
                    [_sum_kinds(sb, "pss", (kind,)) for sb in ours],
                    _sum_kinds(bare, "pss", (kind,)),
                )
            )
    rows.append(_row("PSS sandbox's own processes", f.own_pss, f.bare_pss))
    rows.append(_row("PSS atelet's `runsc wait` (exit watch)", f.wait_pss, 0.0))
    rows.append(_row("PSS per sandbox, in all", f.all_pss, f.bare_pss))
    rows.append(_row("RSS sandbox's own processes", [sb["own"]["rss"] for sb in ours], bare["own"]["rss"]))
    rows.append(_row("RSS atelet's `runsc wait`", [sb["wait"]["rss"] for sb in ours], 0.0))
    cg = [sb["cgroup"]["usage"] for sb in ours if sb.get("cgroup") and sb["cgroup"]["own"]]
    if cg:
        bare_cg = bare["cgroup"]["usage"] if bare.get("cgroup") and bare["cgroup"]["own"] else None
        rows.append(_row("memory cgroup usage (kernel's charge)", cg, bare_cg))
    rows.append(["MemAvailable drop per RUNNING actor", _mib(f.drop), "", "", "", "-", "-"])
    return rows


def _memory_section(res: dict[str, Any], f: _Figures) -> list[str]:
    ours = list(res["ours_sandboxes"].values())
    by_page = {k: statistics.fmean([sb["own"][k] for sb in ours]) for k in ("pss_anon", "pss_shmem", "pss_file")}
    return [
        f"memory per RUNNING sandbox (MiB; ours: {len(ours)} sandboxes; bare: one `runsc restore` of the same "
        "golden checkpoint, no control plane, measured in the same pass)",
        table(["what", "mean", "p50", "min", "max", "bare", "ours/bare"], _memory_rows(res, f)),
        f"PSS of a sandbox's own processes by kind of page (MiB, mean): anon {_mib(by_page['pss_anon']):.1f}, "
        f"shmem (gVisor memory file) {_mib(by_page['pss_shmem']):.1f}, file (runsc binary) "
        f"{_mib(by_page['pss_file']):.1f}; resume {res['resume_s']['p50'] * 1000:.0f} ms p50 "
        f"({res['concurrency']} at a time), bare restore {res['bare_timing']['restore_s'] * 1000:.0f} ms",
        "",
    ]


def _workers_section(res: dict[str, Any]) -> list[str]:
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
    return [
        "idle workers (a network namespace + veth pair each); MemAvailable drop from before start to ready (MiB)",
        table(["stack", "netns", "MemAvail drop", "atelet RSS", "atelet PSS", "control plane RSS"], worker_rows),
        f"per extra worker between the two stacks: MemAvailable {_mib(per_worker):+.2f} MiB (noisy: the whole "
        f"stack's start is in it), atelet RSS {atelet_rss_per_worker / 1024:+.0f} KiB; {nd['count']} worker "
        f"networks made directly (atelet.netns, no stack): kernel Slab+Percpu {nd['kernel_per_ns'] / 1024:.0f} KiB "
        f"each (MemAvailable drop {-nd['delta']['MemAvailable'] / nd['count'] / 1024:.0f} KiB each, noisy)",
        "",
    ]


def _control_plane_section(res: dict[str, Any], f: _Figures) -> list[str]:
    cp = res["running"]["control_plane"]
    cp_pss = sum(cp.get(k, {}).get("pss", 0) for k in CONTROL_PLANE)
    cp_rows = [[k, _mib(cp.get(k, {}).get("rss", 0)), _mib(cp.get(k, {}).get("pss", 0))] for k in CONTROL_PLANE]
    cp_rows.append(["control plane (the six above)", _mib(f.cp_rss), _mib(cp_pss)])
    dev = cp.get("ate-dev", {})
    cp_rows.append(["ate dev supervisor (not in production)", _mib(dev.get("rss", 0)), _mib(dev.get("pss", 0))])
    return [
        f"control plane with {f.n} RUNNING actors (MiB; postgres: all its processes, RSS counts shared buffers per "
        "process)",
        table(["process", "RSS", "PSS"], cp_rows),
        "",
    ]


def _cpu_section(res: dict[str, Any], f: _Figures) -> list[str]:
    ci, cl, cpu, n = res["cpu_idle"], res["cpu_load"], f.cpu, f.n
    cpu_rows = [
        cpu.row("ours: sandbox + gofer + stubs, per sandbox", cpu.ours_groups, n),
        cpu.row("ours: atelet's `runsc wait`, per sandbox", ["ours runsc wait"], n),
        cpu.row("ours: atelet process, per running sandbox", ["atelet"], n),
        [*cpu.row("bare sandbox (idle window only)", cpu.bare_groups, 1)[:2], "-"],
    ]
    for part in ("router", "api-server", "worker", "temporal", "postgres"):
        cpu_rows.append(cpu.row(f"{part} (whole process)", [part], 1))
    cpu_rows.append(cpu.row("everything of the stack", cpu.everything, 1))
    rps = cl["requests"] / cl["seconds"]
    return [
        f"CPU, % of one core: idle window {ci['seconds']:.0f} s (nothing sent, bare sandbox running too), request "
        f"window {cl['seconds']:.0f} s (`GET /` through the router round-robin over the {n} actors, 8 in flight)",
        table(["what", "idle", "requests"], cpu_rows),
        f"requests: {cl['requests']} ({rps:.0f}/s, {cl['errors']} errors, p50 {cl['latency']['p50'] * 1000:.1f} ms, "
        f"p95 {cl['latency']['p95'] * 1000:.1f} ms); CPU ms per request net of the idle rate: "
        + ", ".join(f"{k} {v:.2f}" for k, v in sorted(cpu.net_ms.items()) if v >= 0.005)
        + f" (total {cpu.per_req:.2f})",
        "",
    ]


def _idle_section(res: dict[str, Any], f: _Figures) -> list[str]:
    n, m, idle = f.n, f.m, res["idle"]
    db, db0 = idle["db"], res["before_resume"]["db"]
    tables = db["tables"]
    ops = tables["operations"]["rows"]
    temporal_growth = idle["temporal_db"] - res["before_resume"]["temporal_db"]
    aops = idle["atelet_operations"]
    db_rows = [
        [t, tables[t]["rows"], tables[t]["bytes"] / 1e3, tables[t]["tuple_bytes"], db0["tables"][t]["rows"]]
        for t in ("actors", "snapshots", "operations")
    ]
    mem_before = res["before_resume"]["mem_available"]
    return [
        f"idle actors: {n + m}, each resumed and suspended once (one FULL snapshot each); resume+suspend "
        f"{res['cycle_s']['p50'] * 1000:.0f} ms p50",
        table(
            ["disk per idle actor (KB)", "mean", "p50", "min", "max"],
            [
                _row("snapshot dir, real bytes", f.snap_real, None, 1e3)[:5],
                _row("  of those that served requests", f.snap_real[:n], None, 1e3)[:5],
                _row("  of those resumed + suspended only", f.snap_real[n:], None, 1e3)[:5],
                _row("snapshot dir, apparent bytes", idle["snapshot_apparent"], None, 1e3)[:5],
                _row("node: atelet actor dir + sandbox log", f.node_bytes, None, 1e3)[:5],
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
        f"MemAvailable {_mib(idle['mem_available']):.0f} MiB vs {_mib(mem_before):.0f} "
        f"before the resumes ({_mib(idle['mem_available'] - mem_before):+.0f}; noisy)",
        "",
    ]


def _estimates(res: dict[str, Any], f: _Figures) -> list[str]:
    cpu = f.cpu
    return [
        "ESTIMATES (derived from the figures above; not run at that scale):",
        f"- memory: (24 GiB - control plane RSS {_mib(f.cp_rss):.0f} MiB) / PSS per sandbox {_mib(f.per_sandbox):.1f} "
        f"MiB = ~{f.est_mem:.0f} RUNNING counters (by the MemAvailable drop per actor, {_mib(f.drop):.1f} MiB: "
        f"~{f.est_mem_drop:.0f}); bare sandboxes by the same formula: ~{f.est_bare:.0f}. Each needs a worker (one "
        "place each by default; the atelet allows up to 1000 per node).",
        f"- CPU: an idle RUNNING counter costs {100 * cpu.idle_per_sandbox:.2f}% of a core (bare: "
        f"{100 * cpu.bare_idle:.2f}%), so ~{f.est_cpu:.0f} idle RUNNING counters would keep 2 cores busy doing "
        f"nothing; requests: {cpu.per_req:.2f} CPU ms each through the router -> ~{f.cores * 1000 / cpu.per_req:.0f}/s"
        f" on {f.cores} idle cores.",
        f"- idle actors: ~{f.est_idle_per_gb:.0f} per GB of disk ({f.per_idle_disk / 1e3:.0f} KB each), "
        f"~{f.free / f.per_idle_disk / 1e6:.2f} million in this machine's {f.free / 1e9:.0f} GB free; Postgres "
        f"~{res['idle']['db']['bytes_per_actor']:.0f} B per actor here (scale benchmark: resume unchanged at 10^6 "
        "rows); no memory, no process.",
    ]


def _key_line(res: dict[str, Any], f: _Figures) -> str:
    nd, cpu = res["netns_direct"], f.cpu
    return (
        f"KEY density: RUNNING PSS {_mib(f.per_sandbox):.1f} MiB/sandbox (own {_mib(statistics.fmean(f.own_pss)):.1f}"
        f" + runsc wait {_mib(statistics.fmean(f.wait_pss)):.1f}) vs bare {_mib(f.bare_pss):.1f} = "
        f"{f.per_sandbox / f.bare_pss:.2f}x; MemAvailable -{_mib(f.drop):.1f} MiB/actor; control plane RSS "
        f"{_mib(f.cp_rss):.0f} MiB; idle CPU {100 * cpu.idle_per_sandbox:.1f}%/sandbox (bare {100 * cpu.bare_idle:.1f}%);"
        f" est. ~{f.est_mem:.0f} RUNNING per 24 GiB by memory, ~{f.est_cpu:.0f} by idle CPU on 2 cores;"
        f" idle {f.per_idle_disk / 1e3:.0f} KB disk -> est. ~{f.est_idle_per_gb:.0f} idle per GB;"
        f" worker network {nd['kernel_per_ns'] / 1024:.0f} KiB kernel"
    )
