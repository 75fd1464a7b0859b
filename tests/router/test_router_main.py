"""The ``ate-router`` process: flags, readiness line, metrics port, clean stop on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from router.main import build_settings, parse_args
from router.settings import RouterSettings, split_host_port
from tests.router.router_harness import free_port

ROOT = Path(__file__).resolve().parents[2]


def test_flags_override_settings(monkeypatch) -> None:
    monkeypatch.setenv("ATE_ROUTER_DOMAIN", "env.example")
    monkeypatch.setenv("ATE_DATABASE_URL", "postgresql://u:secret@db/ate")
    settings = build_settings(parse_args(["--listen", "0.0.0.0:81", "--max-parked", "7",
                                          "--parked-request-budget", "2.5"]))
    assert settings.listen == "0.0.0.0:81"
    assert settings.max_parked == 7
    assert settings.parked_request_budget_seconds == 2.5
    assert settings.domain == "env.example"
    assert settings.database_url == "postgresql://u:secret@db/ate"
    assert "secret" not in str(settings.redacted())
    monkeypatch.setenv("ATE_ROUTER_DATABASE_URL", "postgresql://router@db/ate")
    assert RouterSettings().database_url == "postgresql://router@db/ate"


def test_split_host_port() -> None:
    assert split_host_port("127.0.0.1:8000") == ("127.0.0.1", 8000)
    assert split_host_port("[::1]:80") == ("::1", 80)
    assert split_host_port(":9000") == ("127.0.0.1", 9000)


def test_process_serves_metrics_and_stops_on_sigterm() -> None:
    port, metrics = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ATE_DATABASE_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "router", "--listen", f"127.0.0.1:{port}",
         "--metrics-listen", f"127.0.0.1:{metrics}", "--api-server", f"http://127.0.0.1:{free_port()}",
         "--parked-request-budget", "0.2"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == f"router: ready on 127.0.0.1:{port}"
        resp = httpx.get(f"http://127.0.0.1:{port}/metrics", headers={"ate-target-actor": "demo/c1"})
        assert resp.status_code == 503 and "unreachable" in resp.text  # /metrics is an actor path
        text = httpx.get(f"http://127.0.0.1:{metrics}/metrics").text
        assert 'ate_router_requests_total{outcome="unavailable"} 1.0' in text
        assert "ate_router_parked_requests 0.0" in text
        assert "ate_router_request_duration_seconds_bucket" in text
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert time.monotonic() - started < 5
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
