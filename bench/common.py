"""Shared helpers: percentiles, tables, results JSON, process CPU/RSS from /proc, the stack's database."""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from store.measurements import Measurements

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

Log = Callable[[str], None]
"""Where a benchmark reports progress (print by default)."""


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; nan when empty."""
    if not values:
        return float("nan")
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summary(values: list[float]) -> dict[str, float]:
    """n, mean, p50, p95, p99, max (same unit as the values)."""
    return {
        "n": len(values),
        "mean": statistics.fmean(values) if values else float("nan"),
        "p50": pct(values, 50),
        "p95": pct(values, 95),
        "p99": pct(values, 99),
        "max": max(values) if values else float("nan"),
    }


def ms(seconds: float) -> float:
    return seconds * 1000.0


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A plain aligned text table."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"
        return str(v)

    text = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in text)) if text else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))) for r in text
    ]
    return "\n".join(out)


def write_result(name: str, data: dict[str, Any]) -> Path:
    """bench/results/<name>-<timestamp>.json."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(data, indent=1, default=str))
    return path


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    mem = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    return {"cpus": os.cpu_count(), "mem_bytes": mem, "load_at_start": os.getloadavg(), "kernel": os.uname().release}


def cpu_seconds(pid: int) -> float:
    """User+system CPU seconds of one process (0 when gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0.0
    fields = stat[stat.rfind(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE
    except OSError:
        return 0


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def children_of(pid: int) -> list[int]:
    """Every descendant of pid."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in parents.get(p, []):
            out.append(c)
            todo.append(c)
    return out


@dataclass
class CpuMeter:
    """CPU seconds used by named groups of processes between start() and stop()."""

    groups: dict[str, list[int]]
    start_values: dict[int, float] = field(default_factory=dict)
    wall: float = 0.0

    def start(self) -> None:
        self.start_values = {p: cpu_seconds(p) for pids in self.groups.values() for p in pids}
        self.wall = time.monotonic()

    def stop(self) -> dict[str, float]:
        self.wall = time.monotonic() - self.wall
        return {
            name: sum(max(cpu_seconds(p) - self.start_values.get(p, 0.0), 0.0) for p in pids)
            for name, pids in self.groups.items()
        }


@asynccontextmanager
async def measurements(dsn: str) -> AsyncIterator[Measurements]:
    """The store's benchmark readings and staging (`store.measurements`) on a small pool of their
    own to the stack's database `dsn`; closed on leaving."""
    from store import Store

    store = await Store.connect(dsn, min_size=1, max_size=2)
    try:
        yield store.measurements
    finally:
        await store.close()
