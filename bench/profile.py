"""CPU profiles of running processes with py-spy (skipped, with a note, when py-spy is absent)."""

from __future__ import annotations

import collections
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

PACKAGES = (
    "temporalio",
    "grpc",
    "asyncpg",
    "fastapi",
    "starlette",
    "uvicorn",
    "pydantic",
    "httpx",
    "httpcore",
    "h11",
    "prometheus_client",
    "asyncio",
    "google/protobuf",
    "json",
    "activities",
    "store",
    "workflows",
    "domain",
    "temporal_worker",
    "api",
    "atelet",
    "router",
    "uvloop",
    "ssl",
    "logging",
    "selectors",
)


def py_spy() -> str | None:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return found if Path(found).exists() else None


def start(pids: dict[str, int], seconds: float, rate: int = 67) -> tuple[dict[str, Any], Path] | None:
    binary = py_spy()
    if binary is None:
        return None
    tmp = Path(tempfile.mkdtemp(prefix="ate-bench-prof-"))
    procs = {}
    for name, pid in pids.items():
        out = tmp / f"{name}.txt"
        procs[name] = (
            subprocess.Popen(
                [
                    binary,
                    "record",
                    "-p",
                    str(pid),
                    "-d",
                    str(int(seconds)),
                    "-r",
                    str(rate),
                    "-f",
                    "raw",
                    "-o",
                    str(out),
                    "--nonblocking",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            ),
            out,
        )
    return procs, tmp


def _frame_name(frame: str) -> str:
    return frame.strip()


def _package(frame: str) -> str:
    """First path component of the frame's file: temporalio, asyncio, grpc, api, ... (native when none)."""
    if "(" not in frame:
        return "native"
    where = frame[frame.rfind("(") + 1 :].split(":")[0]
    parts = [p for p in where.split("/") if p and p not in (".", "..")]
    if not parts:
        return "other"
    head = parts[0]
    return head[:-3] if head.endswith(".py") else head


def finish(handle: tuple[dict[str, Any], Path] | None, top: int = 8) -> dict[str, Any]:
    """Wait for the recorders; per process: samples, top leaf functions (self), share by package of the leaf."""
    if handle is None:
        return {"skipped": "py-spy not installed (pip install py-spy into the venv to get profiles)"}
    procs, tmp = handle
    out: dict[str, Any] = {}
    for name, (proc, path) in procs.items():
        proc.wait()
        if not path.exists():
            out[name] = {"error": "no profile written"}
            continue
        leaf: collections.Counter[str] = collections.Counter()
        pkg: collections.Counter[str] = collections.Counter()
        total = 0
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not count.isdigit():
                continue
            n = int(count)
            frames = stack.split(";")
            # drop the thread/process header frames py-spy adds
            frames = [f for f in frames if "(" in f] or frames
            total += n
            leaf[_frame_name(frames[-1])] += n
            pkg[_package(frames[-1])] += n
        out[name] = {
            "samples": total,
            "top_self": [(f, round(100 * c / total, 1)) for f, c in leaf.most_common(top)] if total else [],
            "by_package": [(p, round(100 * c / total, 1)) for p, c in pkg.most_common(10)] if total else [],
        }
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def render(profiles: dict[str, Any]) -> str:
    if "skipped" in profiles:
        return f"profile: {profiles['skipped']}"
    lines = ["CPU profile (py-spy record, non-idle samples only; % of samples)"]
    for name, p in profiles.items():
        if "error" in p:
            lines.append(f"  {name}: {p['error']}")
            continue
        lines.append(
            f"  {name} ({p['samples']} samples): by package of the leaf frame: "
            + ", ".join(f"{k} {v}%" for k, v in p["by_package"][:8])
        )
        for f, v in p["top_self"][:6]:
            lines.append(f"      {v:5.1f}%  {f[:110]}")
    return "\n".join(lines)
