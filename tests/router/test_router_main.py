"""The ``ate-router`` process: flags, readiness line, metrics port, clean stop on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from router.main import build_settings, parse_args
from router.settings import RouterSettings, split_host_port
from tests.router.router_harness import FakeApi, free_port, serve, working_worker

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


def test_a_flag_or_variable_out_of_range_is_refused_naming_it(monkeypatch) -> None:
    with pytest.raises(SystemExit) as refused:
        build_settings(parse_args(["--stop-grace", "0", "--drain-timeout", "-1"]))
    assert str(refused.value) == (
        "router: --drain-timeout -1.0: Input should be greater than or equal to 0; "
        "--stop-grace 0: Input should be greater than or equal to 1"
    )
    monkeypatch.setenv("ATE_ROUTER_MAX_PARKED", "-3")
    with pytest.raises(SystemExit) as refused:
        build_settings(parse_args([]))
    assert str(refused.value) == "router: ATE_ROUTER_MAX_PARKED: Input should be greater than or equal to 0"
    assert build_settings(parse_args(["--max-parked", "4", "--stop-grace", "3"])).stop_grace_seconds == 3


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


@pytest.mark.asyncio
async def test_a_request_outlasting_the_stop_grace_is_told_that_the_router_is_stopping(tmp_path: Path) -> None:
    # A worker that works on the request for longer than the router's stop grace (--stop-grace 2):
    # the client gets a 503 saying why (uvicorn alone sends a bare 500), the worker a reset.
    worker = await working_worker()
    api = FakeApi(worker.port)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATE_")} | {"PYTHONPATH": str(ROOT)}
    try:
        async with serve(api.app) as served, httpx.AsyncClient(timeout=60) as client:
            with (tmp_path / "router.log").open("w") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "router", "--listen", f"127.0.0.1:{port}",
                     "--metrics-listen", f"127.0.0.1:{free_port()}", "--api-server", served.url,
                     "--stop-grace", "2"],
                    cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=log, text=True,
                )  # fmt: skip
            try:
                assert proc.stdout is not None
                ready = await asyncio.to_thread(proc.stdout.readline)
                assert ready.strip() == f"router: ready on 127.0.0.1:{port}", (tmp_path / "router.log").read_text()
                request = asyncio.create_task(
                    client.get(f"http://127.0.0.1:{port}/work", headers={"ate-target-actor": "demo/c1"})
                )
                await asyncio.wait_for(worker.got_head.wait(), 20)
                proc.send_signal(signal.SIGTERM)
                response = await request
                assert await asyncio.wait_for(worker.ended, 10) == "reset"
                assert await asyncio.to_thread(proc.wait, 30) == 0
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    finally:
        worker.server.close()
    assert response.status_code == 503, response.text
    assert response.text == (
        "the router is stopping and this request to actor demo/c1 did not finish within its 2 s grace; "
        "send it again (another router replica, or this one once it is back, takes it)\n"
    )
    assert response.headers["retry-after"] == "1"
    assert "GET /work 503 error" in (tmp_path / "router.log").read_text()  # logged as cut, not ok
