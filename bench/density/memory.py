"""Memory as the kernel reports it, for the density run: /proc/meminfo and per-process smaps_rollup.

PSS (proportional set size, from `/proc/<pid>/smaps_rollup`) splits each shared page fairly
among the processes that map it, so the PSS of a group of processes is what the group costs.
"""

from __future__ import annotations

import statistics
import time

GIB, MIB = 2**30, 2**20


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
