"""The sandboxes of a runsc root and their processes: sandbox, gofer, stubs, `runsc wait`.

From `runsc list` and one pass over /proc: each sandbox's own processes (its sandbox PID with its
descendants, and every process naming its bundle, the gofer), split by kind, with their memory
summed (`bench.density.memory`), its memory cgroup, and apart from them the `runsc wait` watchers
the atelet adds. Also how many runsc processes run on the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from bench.density.memory import mem_sum

KINDS = ("sandbox", "gofer", "stub", "other")
"""The kinds of a sandbox's own processes the figures are split by (`runsc wait` is counted apart)."""


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
