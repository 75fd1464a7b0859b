"""`ate dev` end to end, with stand-ins for the four ate processes.

The stand-ins live in a temporary directory that is the working directory of `ate dev` (and so
of its children, where `python -m` finds them before the project's own packages). PostgreSQL
and Temporal are real.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import yaml
from cryptography import x509

from ate.dev.postgres import EmbeddedPostgres

PROJECT = Path(__file__).resolve().parents[2]

FAKE_API = """
import json, os, signal, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

def main(argv=None):
    args = dict(zip(argv[::2], argv[1::2]))
    record = os.environ["FAKE_RECORD"]

    def on_term(*_):
        with open(record, "a") as f:
            f.write(json.dumps({"part": "api-server", "signal": "SIGTERM"}) + "\\n")
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    with open(record, "a") as f:
        f.write(json.dumps({"part": "api-server", "argv": argv, "db": os.environ["ATE_DATABASE_URL"],
                            "temporal": os.environ["ATE_TEMPORAL_ADDRESS"]}) + "\\n")

    issued = set()

    class Handler(BaseHTTPRequestHandler):
        def _json(self, body, status=200):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/healthz":
                return self._json({"status": "ok"})
            if self.path == "/v1/whoami":
                if self.headers.get("authorization", "").removeprefix("Bearer ") in issued:
                    return self._json({"name": "fake", "grants": []})
                return self._json({"reason": "Unauthenticated", "message": "no", "details": {}}, 401)
            if self.path.startswith("/v1/actors"):
                return self._json({"items": [
                    {"atespace": "demo", "name": "c1", "state": "RUNNING"},
                    {"atespace": "demo", "name": "c2", "state": "SUSPENDED"}], "next_page_token": None})
            self.send_response(404)
            self.end_headers()

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
            with open(record, "a") as f:
                f.write(json.dumps({"part": "api-server", "post": self.path,
                                    "authorization": self.headers.get("authorization")}) + "\\n")
            if self.path == "/v1/tokens":
                token = "fake-token-" + body["name"]
                issued.add(token)
                return self._json({"token_id": "0123456789ab", "token": token, "grants": body["grants"]}, 201)
            self._json({"atespace": "demo", "name": "c1", "state": "SUSPENDED"})

        def log_message(self, *a):
            pass

    ThreadingHTTPServer((args["--host"], int(args["--port"])), Handler).serve_forever()
"""

FAKE_PROCESS = """
import json, os, signal, sys, time

def main(argv=None):
    def on_term(*_):
        with open(os.environ["FAKE_RECORD"], "a") as f:
            f.write(json.dumps({"part": "{part}", "signal": "SIGTERM"}) + "\\n")
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    with open(os.environ["FAKE_RECORD"], "a") as f:
        f.write(json.dumps({"part": "{part}", "argv": argv, "pid": os.getpid()}) + "\\n")
    if os.environ.get("FAKE_FAIL") == "{part}":
        print("{part}: something is badly wrong", flush=True)
        sys.exit(3)
    print("{part}: ready", flush=True)
    time.sleep(3600)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_fakes(root: Path) -> None:
    files = {
        "api/__init__.py": "",
        "api/main.py": FAKE_API,
        "temporal_worker/__init__.py": "",
        "temporal_worker/main.py": FAKE_PROCESS.replace("{part}", "worker"),
        "atelet/__init__.py": "",
        "atelet/main.py": FAKE_PROCESS.replace("{part}", "atelet"),
        "router/__init__.py": "",
        "router/main.py": FAKE_PROCESS.replace("{part}", "router"),
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def start_dev(tmp_path: Path, extra_env: dict[str, str], *args: str) -> tuple[subprocess.Popen[str], dict[str, int]]:
    write_fakes(tmp_path)
    ports = {name: free_port() for name in ("api", "router", "atelet", "temporal", "ui", "metrics")}
    env = {k: v for k, v in os.environ.items() if k not in ("ATE_DATABASE_URL", "ATE_TEMPORAL_ADDRESS")}
    env.update({"PYTHONPATH": str(PROJECT), "FAKE_RECORD": str(tmp_path / "record.jsonl"), "PYTHONUNBUFFERED": "1"})
    env["ATE_CONFIG"] = str(tmp_path / "ate-config.yaml")
    env.update(extra_env)
    argv = [
        sys.executable, "-m", "ate", "dev", "--data-dir", str(tmp_path / ".ate"),
        "--api-port", str(ports["api"]), "--router-port", str(ports["router"]),
        "--atelet-port", str(ports["atelet"]), "--temporal-port", str(ports["temporal"]),
        "--ui-port", str(ports["ui"]), "--metrics-port-base", str(ports["metrics"]), *args,
    ]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, ports


def read_until(proc: subprocess.Popen[str], marker: str, timeout: float) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if marker in line:
            return lines
    raise AssertionError(f"{marker!r} not seen; output so far:\n" + "\n".join(lines))


def ctrl_c(proc: subprocess.Popen[str]) -> str:
    """Ctrl-C `ate dev`, wait until it stopped (status 0) and return the rest of its output."""
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return out


def leftovers(data_dir: Path) -> list[str]:
    """Live processes whose command line mentions the data dir."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if str(data_dir) in cmd and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(cmd)
    return found


def test_ate_dev_starts_everything_and_stops_in_order(tmp_path: Path) -> None:
    proc, ports = start_dev(tmp_path, {}, "--workers", "3")
    try:
        lines = read_until(proc, "ate: ready", 90)
        text = "\n".join(lines)
        assert "postgres: ready" in text
        assert f"temporal: ready on 127.0.0.1:{ports['temporal']}, UI http://127.0.0.1:{ports['ui']}" in text
        assert f"api-server: ready on http://127.0.0.1:{ports['api']}" in text
        assert "worker: ready" in text and "atelet: ready" in text and "router: ready" in text
        assert lines[-1] == "ate: ready"

        records = [json.loads(line) for line in (tmp_path / "record.jsonl").read_text().splitlines()]
        api = next(r for r in records if r["part"] == "api-server")
        assert api["db"].startswith("postgresql://") and "/ate" in api["db"]
        assert api["temporal"] == f"127.0.0.1:{ports['temporal']}"
        assert api["argv"][-2:] == ["--snapshot-location", f"file://{tmp_path / '.ate' / 'snapshots'}"]
        atelet = next(r for r in records if r["part"] == "atelet")["argv"]
        assert atelet[atelet.index("--workers") + 1] == "3"
        assert atelet[atelet.index("--api-server") + 1] == f"http://127.0.0.1:{ports['api']}"
        assert atelet[atelet.index("--state-dir") + 1] == str(tmp_path / ".ate" / "atelet")
        router = next(r for r in records if r["part"] == "router")["argv"]
        assert router == [
            "--listen",
            f"127.0.0.1:{ports['router']}",
            "--api-server",
            f"http://127.0.0.1:{ports['api']}",
            "--metrics-listen",
            f"127.0.0.1:{ports['metrics']}",
        ]
        assert atelet[atelet.index("--metrics-listen") + 1] == f"127.0.0.1:{ports['metrics'] + 85}"
        tls = tmp_path / ".ate" / "tls"
        node = atelet[atelet.index("--node") + 1]
        assert [atelet[atelet.index(flag) + 1] for flag in ("--tls-cert", "--tls-key", "--tls-ca")] == [
            str(tls / "nodes" / f"{node}.crt"), str(tls / "nodes" / f"{node}.key"), str(tls / "ca.crt"),
        ]  # fmt: skip
        worker = next(r for r in records if r["part"] == "worker")["argv"]
        assert [worker[worker.index(f"--atelet-client-tls-{part}") + 1] for part in ("cert", "key", "ca")] == [
            str(tls / "control-plane.crt"), str(tls / "control-plane.key"), str(tls / "ca.crt"),
        ]  # fmt: skip
        ca = x509.load_pem_x509_certificate((tls / "ca.crt").read_bytes())
        for name, common_name in ((f"nodes/{node}", node), ("control-plane", "ate-control-plane")):
            leaf = x509.load_pem_x509_certificate((tls / f"{name}.crt").read_bytes())
            leaf.verify_directly_issued_by(ca)
            assert leaf.subject.rfc4514_string() == f"CN={common_name}"
            assert (tls / f"{name}.key").stat().st_mode & 0o077 == 0
        assert f"tls: atelet mutual TLS with the local CA in {tls}" in text

        out = ctrl_c(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    tail = out.splitlines()
    assert "ate: suspended demo/c1" in tail
    order = [line.split(":")[0] for line in tail if line.endswith(": stopped")]
    assert order == ["router", "atelet", "worker", "api-server", "temporal", "postgres", "ate"]
    records = [json.loads(line) for line in (tmp_path / "record.jsonl").read_text().splitlines()]
    posts = {r["post"]: r["authorization"] for r in records if "post" in r}
    assert posts["/v1/atespaces/demo/actors/c1/suspend"] == "Bearer fake-token-ate-dev-local-admin"
    assert "/v1/atespaces/demo/actors/c2/suspend" not in posts
    credentials = tmp_path / ".ate" / "credentials"
    bootstrap = (credentials / "bootstrap-token").read_text().strip()
    assert len(bootstrap) >= 32 and posts["/v1/tokens"] == f"Bearer {bootstrap}"
    assert {oct(p.stat().st_mode & 0o777) for p in credentials.iterdir()} == {"0o600"}
    assert (credentials / "local-admin.token").read_text().strip() == "fake-token-ate-dev-local-admin"
    assert (credentials / "router.token").read_text().strip() == "fake-token-ate-dev-router"
    config = yaml.safe_load((tmp_path / "ate-config.yaml").read_text())
    assert config == {
        "current-context": "ate-dev",
        "contexts": {
            "ate-dev": {"server": f"http://127.0.0.1:{ports['api']}", "token-file": str(credentials / "local-admin.token")}
        },
    }
    assert leftovers(tmp_path / ".ate") == []
    for port in ports.values():
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0


def test_a_failing_part_stops_everything_with_its_log(tmp_path: Path) -> None:
    external = {
        "ATE_DATABASE_URL": "postgresql://x:secret@db/ate",
        "ATE_TEMPORAL_ADDRESS": "127.0.0.1:1",
        "FAKE_FAIL": "atelet",
    }
    proc, _ = start_dev(tmp_path, external)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, out
    assert "postgres: using ATE_DATABASE_URL (postgresql://x:***@db/ate)" in out
    assert "atelet: exited with code 3 before it was ready" in out
    assert "atelet: something is badly wrong" in out
    assert "ate: ready" not in out
    assert "worker: stopped" in out and "api-server: stopped" in out
    assert leftovers(tmp_path / ".ate") == []


def part_pid(tmp_path: Path, part: str) -> int:
    """The PID the fake `part` recorded last."""
    records = [json.loads(line) for line in (tmp_path / "record.jsonl").read_text().splitlines()]
    return [r["pid"] for r in records if r["part"] == part and "pid" in r][-1]


def temporal_pids(data_dir: Path) -> list[int]:
    return [
        p.pid
        for p in psutil.process_iter(["cmdline", "status"])
        if str(data_dir / "temporal.db") in " ".join(p.info["cmdline"] or []) and p.info["status"] != "zombie"
    ]


def postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "postgres" / "postmaster.pid").read_text().splitlines()[0])


def test_parts_that_crash_are_restarted(tmp_path: Path) -> None:
    data = tmp_path / ".ate"
    proc, ports = start_dev(tmp_path, {})
    try:
        lines = read_until(proc, "ate: ready", 90)
        atelet_line = next(line for line in lines if line.startswith("atelet: ready"))
        assert re.fullmatch(
            rf"atelet: ready on 127\.0\.0\.1:{ports['atelet']} \(node \S+-[0-9a-f]{{4}}, subnet 10\.\d+\.0\.0/16, 2 workers\)",
            atelet_line,
        ), atelet_line

        os.kill(part_pid(tmp_path, "worker"), signal.SIGKILL)
        lines = read_until(proc, "worker: ready (task queue ate-control)", 30)
        assert lines[-2:] == ["worker: exited (-9), restarting", "worker: ready (task queue ate-control)"]

        (temporal,) = temporal_pids(data)
        os.kill(temporal, signal.SIGKILL)
        lines = read_until(proc, "temporal: ready on", 60)
        assert lines[0] == "temporal: exited (-9), restarting"
        assert temporal_pids(data) != [temporal]

        os.kill(postmaster_pid(data), signal.SIGKILL)
        lines = read_until(proc, "postgres: ready", 90)
        assert lines[0] == "postgres: exited (code unknown: not our child), restarting"

        os.kill(part_pid(tmp_path, "atelet"), signal.SIGKILL)
        out = ctrl_c(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    tail = out.splitlines()
    # The atelet is not restarted for the stop; what it may have left is reported.
    assert any(line.startswith("ate: the atelet was not running") for line in tail), out
    assert "atelet: ready" not in out
    order = [line.split(":")[0] for line in tail if line.endswith(": stopped")]
    assert order == ["router", "worker", "api-server", "temporal", "postgres", "ate"]
    assert leftovers(data) == []


def test_a_stop_while_the_worker_is_down_leaves_the_running_sandboxes_for_the_next_start(tmp_path: Path) -> None:
    # A suspend is a workflow: with the worker down it cannot run, and a clean stop of the atelet
    # would end the sandboxes of the RUNNING actors (c1 here) and lose their memory.
    data = tmp_path / ".ate"
    proc, _ = start_dev(tmp_path, {})
    try:
        read_until(proc, "ate: ready", 90)
        worker = part_pid(tmp_path, "worker")
        os.kill(worker, signal.SIGKILL)
        while psutil.pid_exists(worker) and psutil.Process(worker).status() != psutil.STATUS_ZOMBIE:
            time.sleep(0.01)
        out = ctrl_c(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "ate: not suspending the running actors: worker is down" in out
    assert "atelet: killed, leaving the sandboxes of the actors still RUNNING; the next `ate dev` adopts them" in out
    records = [json.loads(line) for line in (tmp_path / "record.jsonl").read_text().splitlines()]
    assert not any(r.get("post", "").endswith("/suspend") for r in records)
    assert not any(r["part"] == "atelet" and r.get("signal") == "SIGTERM" for r in records)  # never a clean stop
    assert leftovers(data) == []


def test_a_second_ate_dev_on_the_same_data_dir_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    # On other ports it would adopt the first one's PostgreSQL and sandboxes and stop them when it
    # stops (the chaos run of 2026-12-02 saw the first stack lose its database that way).
    first, _ = start_dev(tmp_path, {})
    try:
        read_until(first, "ate: ready", 90)
        second, _ = start_dev(tmp_path, {})  # new free ports, the same --data-dir
        out, _ = second.communicate(timeout=60)
        assert second.returncode == 1, out
        assert out.strip() == (
            f"ate: another 'ate dev' (pid {first.pid}) runs on the data dir {tmp_path / '.ate'}: stop it first, or "
            "give this one another --data-dir (and other ports: see 'ate dev --help')"
        )
        assert first.poll() is None
        out = ctrl_c(first)
    finally:
        if first.poll() is None:
            first.kill()
    assert "ate: suspended demo/c1" in out.splitlines()  # the first stack still had its parts
    assert leftovers(tmp_path / ".ate") == []


def test_killing_ate_dev_kills_the_atelet_and_terminates_every_other_part_but_postgres(tmp_path: Path) -> None:
    # The atelet is killed, never stopped: its clean stop would end the sandboxes of the RUNNING
    # actors (the chaos run of 2026-12-02 found them all CRASHED after a kill -9 of ate dev).
    data = tmp_path / ".ate"
    proc, _ = start_dev(tmp_path, {})
    try:
        read_until(proc, "ate: ready", 90)
        assert temporal_pids(data)
        atelet = part_pid(tmp_path, "atelet")
        proc.kill()
        proc.wait(10)
        deadline = time.monotonic() + 20
        parts = {"api-server", "worker", "router"}
        termed: set[str] = set()
        while time.monotonic() < deadline and (termed != parts or temporal_pids(data)):
            records = [json.loads(line) for line in (tmp_path / "record.jsonl").read_text().splitlines()]
            termed = {r["part"] for r in records if r.get("signal") == "SIGTERM"}
            time.sleep(0.2)
        assert termed == parts
        assert not psutil.pid_exists(atelet) or psutil.Process(atelet).status() == psutil.STATUS_ZOMBIE
        records = [json.loads(line) for line in (tmp_path / "record.jsonl").read_text().splitlines()]
        assert not any(r["part"] == "atelet" and r.get("signal") == "SIGTERM" for r in records)
        assert temporal_pids(data) == []
        assert psutil.pid_exists(postmaster_pid(data))  # adopted by the next start
    finally:
        if proc.poll() is None:
            proc.kill()
        EmbeddedPostgres(data / "postgres").stop()
    assert leftovers(data) == []


def test_help_says_postgres_is_adopted() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ate", "dev", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", "PYTHONPATH": str(PROJECT)},
        check=True,
    ).stdout
    text = " ".join(out.split())
    assert "the atelet is killed with it, so that its sandboxes keep running" in text
    assert "every other part but PostgreSQL gets SIGTERM" in text
    assert "the next ate dev with the same --data-dir adopts it" in text
