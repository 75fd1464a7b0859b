"""Worker networks for the density run: listing them, and what they cost the kernel without a stack.

A worker is a network namespace plus a veth pair (`atelet.netns`). `netns_cost` makes many the
atelet's way under a node name and subnet of their own, reads the kernel's counters before and
after, and deletes them again.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from typing import Any

from bench.density.memory import mem_available, meminfo

NS_NODE, NS_SUBNET = "atebench-density-ns", "10.96.128.0/20"
"""Networks made directly (netns_cost): their own node name (names) and subnet (up to 1024)."""


def netns_list(prefix: str) -> list[str]:
    """Network namespaces whose name starts with prefix (`ip netns list`)."""
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return [line.split()[0] for line in r.stdout.splitlines() if line.split() and line.split()[0].startswith(prefix)]


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
