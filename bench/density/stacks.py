"""The density run's stacks: their node, their parts' memory and CPU groups, a checked stop."""

from __future__ import annotations

import re
import shutil
from typing import Any

from bench import stack as stack_mod
from bench.common import Log
from bench.density.memory import mem_sum
from bench.density.networks import netns_list
from bench.density.sandboxes import KINDS, runsc_list, runsc_processes


def node_name(stack: stack_mod.Stack) -> str:
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
    node = node_name(stack) if any("(node " in line for line in stack.lines) else ""
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


def cpu_groups(
    stack: stack_mod.Stack, ours: dict[str, dict[str, Any]], bare: dict[str, Any] | None
) -> dict[str, list[int]]:
    """PIDs for CpuMeter: the stack's parts (runsc split by sandbox kind), the bare sandbox's."""
    groups = {k: v for k, v in stack.processes().items() if k not in ("ate-dev", "runsc")}
    for kind in KINDS:
        groups[f"ours {kind}"] = [p for sb in ours.values() for p in sb["pids"].get(kind, [])]
    groups["ours runsc wait"] = [p for sb in ours.values() for p in sb["wait_pids"]]
    for kind, pids in (bare or {}).get("pids", {}).items():
        groups[f"bare {kind}"] = pids
    return groups
