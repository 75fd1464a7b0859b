"""Start/stop a private `ate dev` for a benchmark, on non-default ports, in its own UTS namespace.

Why the UTS namespace: `ate dev` names its atelet node after the hostname and the atelet names
network namespaces and veths after the node (`ate-<node>-<worker>`) and *deletes leftovers with
those names at start*. A second `ate dev` on the same machine (a developer's, the test suite's)
would tear down the first one's worker namespaces. Running ours under `unshare --uts` with its own
hostname gives it its own names. The metrics ports of router/worker/atelet (9000/9001/9085) are
not flags of `ate dev`; we move them with the ATE_* variables every child reads.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import ROOT, Log, children_of, cmdline

PORTS = {"api": 18180, "router": 18100, "atelet": 18185, "temporal": 17333, "ui": 18333}
METRICS = {"router": 19000, "worker": 19001, "atelet": 19085}
NODE = "atebench"
SUBNET = "10.97.0.0/16"


@dataclass
class Stack:
    """A running `ate dev` and what the benchmarks need to reach it."""

    data_dir: Path
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    hollow: bool = False
    keep: bool = False

    api_url: str = f"http://127.0.0.1:{PORTS['api']}"
    router_url: str = f"http://127.0.0.1:{PORTS['router']}"
    temporal_address: str = f"127.0.0.1:{PORTS['temporal']}"
    atelet_address: str = f"127.0.0.1:{PORTS['atelet']}"
    router_metrics: str = f"http://127.0.0.1:{METRICS['router']}/metrics"
    worker_metrics: str = f"http://127.0.0.1:{METRICS['worker']}/metrics"
    atelet_metrics: str = f"http://127.0.0.1:{METRICS['atelet']}/metrics"

    @property
    def token(self) -> str:
        """The admin token `ate dev` made for the local user."""
        return (self.data_dir / "credentials" / "local-admin.token").read_text().strip()

    @property
    def headers(self) -> dict[str, str]:
        """Request headers acting as that admin."""
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres:@/ate?host={self.data_dir / 'postgres'}"

    def processes(self) -> dict[str, list[int]]:
        """PIDs by part: api-server, worker, atelet, router, temporal, postgres, runsc, ate-dev."""
        groups: dict[str, list[int]] = {"ate-dev": [self.proc.pid]}
        names = {
            "ate api-server": "api-server",
            "ate worker": "worker",
            "ate atelet": "atelet",
            "ate router": "router",
            "server start-dev": "temporal",
        }
        for pid in children_of(self.proc.pid):
            line = cmdline(pid)
            for needle, name in names.items():
                if needle in line:
                    groups.setdefault(name, []).append(pid)
        pg, runsc = [], []
        pgdir = str(self.data_dir / "postgres")
        runsc_root = str(self.data_dir / "atelet" / "runsc")
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                line = cmdline(int(entry))
                if pgdir in line and "postgres" in line:
                    pg.append(int(entry))
                elif runsc_root in line:
                    runsc.append(int(entry))
        for p in list(pg):
            pg += [c for c in children_of(p) if c not in pg]
        groups["postgres"] = pg
        groups["runsc"] = runsc
        return groups

    def stop(self, timeout: float = 120.0) -> None:
        """SIGTERM (ate dev suspends running actors and stops every part), then remove the data dir."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGTERM)  # second signal: ate dev kills everything
                self.proc.wait(30)
        if not self.keep:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def start(
    *,
    workers: int = 1,
    pool: Path | None = None,
    hollow: bool = False,
    env: dict[str, str] | None = None,
    keep: bool = False,
    timeout: float = 240.0,
    log: Log = print,
    extra: tuple[str, ...] = (),
) -> Stack:
    """Start `ate dev` and wait for `ate: ready`. `env` adds/overrides variables of every part;
    `extra` are more `ate dev` flags (e.g. `--object-store`)."""
    data_dir = Path(tempfile.mkdtemp(prefix="ate-bench-"))
    child_env = {k: v for k, v in os.environ.items() if k not in ("ATE_DATABASE_URL", "ATE_TEMPORAL_ADDRESS")}
    child_env.update(
        {
            "ATE_ATELET_SUBNET": SUBNET,
            # the egress proxy asks loopback (nothing answers): no benchmark sends a DNS query off the machine
            "ATE_ATELET_EGRESS_DNS_NAMESERVERS": '["127.0.0.1"]',
            "ATE_ROUTER_METRICS_LISTEN": f"127.0.0.1:{METRICS['router']}",
            "ATE_METRICS_LISTEN": f"127.0.0.1:{METRICS['worker']}",
            "ATE_ATELET_METRICS_LISTEN": f"127.0.0.1:{METRICS['atelet']}",
            "PYTHONUNBUFFERED": "1",
            "ATE_CONFIG": str(data_dir / "ate-config.yaml"),
        }
    )
    if hollow:
        child_env["ATE_ATELET_HOLLOW"] = "true"
    child_env.update(env or {})
    ate = str(Path(sys.executable).parent / "ate")
    argv = [
        "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', NODE,
        ate, "dev", "--data-dir", str(data_dir),
        "--api-port", str(PORTS["api"]), "--router-port", str(PORTS["router"]),
        "--atelet-port", str(PORTS["atelet"]), "--temporal-port", str(PORTS["temporal"]),
        "--ui-port", str(PORTS["ui"]), "--metrics-port-base", str(METRICS["router"]),
    ]  # fmt: skip
    argv += ["--pool", str(pool)] if pool else ["--workers", str(workers)]
    argv += list(extra)
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    stack = Stack(data_dir=data_dir, proc=proc, hollow=hollow, keep=keep)
    ready = threading.Event()

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            stack.lines.append(line.rstrip())
            if line.startswith("ate: ready"):
                ready.set()

    threading.Thread(target=reader, daemon=True).start()
    started = time.monotonic()
    while not ready.wait(0.2):
        if proc.poll() is not None or time.monotonic() - started > timeout:
            stack.stop()
            raise RuntimeError("ate dev did not become ready:\n" + "\n".join(stack.lines[-30:]))
    log(f"stack: ate dev ready in {time.monotonic() - started:.1f} s (data {data_dir}, hollow={hollow})")
    return stack
