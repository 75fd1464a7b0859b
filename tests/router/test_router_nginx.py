"""What only the nginx data path has: its own cache of RUNNING actors (filled from the control
service's answers, forgotten when PostgreSQL NOTIFY names the actor or LISTEN is lost), the
in-flight counts a drain reads, the entries a drain or a lost lease makes unusable, its counters, and its answer to a worker without a status line.
The behaviour both data paths share is tested on both by the other router tests."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import httpx
import pytest

from router.nginx import config as nginx_config
from router.nginx.config import NginxLayout
from router.nginx.supervisor import NginxProcess
from router.settings import RouterSettings
from tests.router.router_harness import free_port

H = {"ate-target-actor": "demo/c1"}
DATA_PATHS = ("nginx",)


async def _cache_on(env) -> None:
    env.router.core.cache.enabled = True  # as if LISTEN were live


async def test_nginx_serves_a_running_actor_from_its_cache_until_notify_names_it(start_router) -> None:
    env = await start_router()
    await _cache_on(env)
    for _ in range(3):
        assert (await env.client.get("/", headers=H)).status_code == 200
    assert env.api.calls["demo/c1"] == 1
    # The control service forgets the actor (a cache hit there would hide nginx's own): only
    # nginx's entry can answer now.
    env.router.core.cache._entries.clear()
    assert (await env.client.get("/", headers=H)).status_code == 200
    assert env.api.calls["demo/c1"] == 1
    env.router.core.cache.on_notification("demo/c1 SUSPENDING")
    await env.router.admin.settled()
    assert (await env.client.get("/", headers=H)).status_code == 200
    assert env.api.calls["demo/c1"] == 2


async def test_actors_on_the_same_worker_each_have_their_own_cached_route(start_router) -> None:
    env = await start_router()
    await _cache_on(env)
    actors = ("demo/c1", "demo/c2", "other/c1")  # one worker serves all three (FakeApi)
    for _ in range(2):
        for actor in actors:
            assert (await env.client.get("/", headers={"ate-target-actor": actor})).status_code == 200
    env.router.core.cache._entries.clear()  # only nginx's entries can answer now
    for actor in actors:
        assert (await env.client.get("/", headers={"ate-target-actor": actor})).status_code == 200
    assert [env.api.calls[actor] for actor in actors] == [1, 1, 1]


async def test_a_lost_listen_empties_nginx_and_turns_its_cache_off(start_router) -> None:
    env = await start_router()
    await _cache_on(env)
    assert (await env.client.get("/", headers=H)).status_code == 200
    env.router.core.cache.enabled = False
    env.router.core.cache.clear()  # what CacheInvalidator does when its connection is lost
    await env.router.admin.settled()
    for expected in (2, 3):
        assert (await env.client.get("/", headers=H)).status_code == 200
        assert env.api.calls["demo/c1"] == expected  # nothing cached while LISTEN is down


async def test_the_host_forms_lua_reads_are_the_ones_python_reads(start_router) -> None:
    env = await start_router()
    await _cache_on(env)
    hosts = [
        "c1.demo.actors.ate.local",
        "C1.Demo.Actors.ATE.local:8000",
        "c1.demo.actors.ate.local.",
        " c1.demo.actors.ate.local.:443",
    ]
    for host in hosts:
        response = await env.client.get("/x", headers={"host": host.strip()})
        assert response.status_code == 200, (host, response.text)
    assert env.api.calls["demo/c1"] == 1  # one actor, however its host was spelt
    for bad in ("x.c1.demo.actors.ate.local", "c1.demo.actors.ate.localx", "c_1.demo.actors.ate.local"):
        response = await env.client.get("/", headers={"host": bad})
        assert response.status_code == 400 and repr(bad) in response.text


async def test_a_token_actor_is_cached_per_credential(start_router) -> None:
    env = await start_router()
    await _cache_on(env)
    env.api.access = {"mode": "token", "passCredential": False}
    env.api.grants = {"good": {"demo/c1"}}
    for _ in range(3):
        assert (await env.client.get("/", headers={**H, "Authorization": "Bearer good"})).status_code == 200
    refused = await env.client.get("/", headers={**H, "Authorization": "Bearer other"})
    assert refused.status_code == 401  # an entry for one credential never lets another through
    assert (await env.client.get("/", headers=H)).status_code == 401
    assert len(env.api.reviews) == 2


async def test_in_flight_requests_are_counted_per_actor_for_drain(start_router) -> None:
    env = await start_router()
    slow = asyncio.create_task(env.client.get("/sleep?s=0.5", headers=H))
    seen = 0
    for _ in range(300):
        seen = await env.router.in_flight("demo/c1")
        if seen:
            break
        await asyncio.sleep(0.01)
    assert seen == 1
    assert (await slow).status_code == 200
    assert await env.router.in_flight("demo/c1") == 0
    assert await env.router.in_flight("demo/other") == 0


async def test_outcomes_are_counted_and_exported_with_the_python_names(start_router) -> None:
    env = await start_router()
    assert (await env.client.get("/", headers=H)).status_code == 200
    assert (await env.client.get("/", headers={"ate-target-actor": "Bad"})).status_code == 400
    families = {f.name: f for f in env.router.metrics.collect()}
    assert set(families) == {
        "ate_router_requests", "ate_router_request_duration_seconds", "ate_router_received_bytes", "ate_router_sent_bytes"
    }  # fmt: skip
    counts = {
        s.labels["outcome"]: s.value for s in families["ate_router_requests"].samples if s.name.endswith("_total")
    }
    assert counts == {"parked_ok": 1.0, "bad_target": 1.0}
    buckets = [s for s in families["ate_router_request_duration_seconds"].samples if s.name.endswith("_count")]
    assert {s.labels["outcome"]: s.value for s in buckets} == {"parked_ok": 1.0, "bad_target": 1.0}


async def test_ate_router_with_the_nginx_data_path_serves_restarts_nginx_and_stops(tmp_path) -> None:
    """A real `python -m router --data-path nginx`: it serves and exports the request counters;
    nginx killed is started again; SIGTERM stops nginx and the router, exit 0."""
    import contextlib
    import os
    import signal
    import sys
    from pathlib import Path

    from tests.router.router_harness import DOMAIN, FakeApi, WorkerLog, free_port, serve, worker_app

    root = Path(__file__).resolve().parents[2]
    async with serve(worker_app(WorkerLog())) as worker, serve(FakeApi(worker.port).app) as api_served:
        port, metrics = free_port(), free_port()
        env = {**os.environ, "PYTHONPATH": str(root)}
        env.pop("ATE_DATABASE_URL", None)
        run_dir = tmp_path / "run"
        masters: list[int] = []
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "router", "--data-path", "nginx", "--listen", f"127.0.0.1:{port}",
            "--metrics-listen", f"127.0.0.1:{metrics}", "--api-server", api_served.url, "--domain", DOMAIN,
            "--nginx-run-dir", str(run_dir), cwd=root, env=env, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            async with asyncio.timeout(60), httpx.AsyncClient(timeout=30) as client:
                assert proc.stdout is not None
                ready = (await proc.stdout.readline()).decode().strip()
                assert ready == f"router: ready on 127.0.0.1:{port} (nginx data path, 1 worker)"
                assert (await client.get(f"http://127.0.0.1:{port}/", headers=H)).status_code == 200
                exported = ""
                for _ in range(500):  # nginx counts a request in its log phase, after the answer went out
                    exported = (await client.get(f"http://127.0.0.1:{metrics}/metrics")).text
                    if 'ate_router_requests_total{outcome="parked_ok"} 1.0' in exported:
                        break
                    await asyncio.sleep(0.02)
                assert 'ate_router_requests_total{outcome="parked_ok"} 1.0' in exported
                assert "ate_router_parked_requests 0.0" in exported  # the control service's own

                first = int((run_dir / "nginx.pid").read_text())
                masters.append(first)
                os.kill(first, signal.SIGKILL)
                answered = None
                for _ in range(1500):  # the router starts nginx again (30 s, for a loaded machine)
                    try:
                        answered = (await client.get(f"http://127.0.0.1:{port}/", headers=H)).status_code
                        break
                    except httpx.TransportError:
                        await asyncio.sleep(0.02)
                assert answered == 200
                second = int((run_dir / "nginx.pid").read_text())
                masters.append(second)
                assert second != first

                proc.send_signal(signal.SIGTERM)
                assert await proc.wait() == 0
                with pytest.raises(ProcessLookupError):
                    os.kill(second, 0)  # nginx went with it
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            for master in masters:  # a failure between the kill and the restart leaves no orphaned worker
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(master, signal.SIGKILL)  # each nginx runs in a session of its own


async def test_an_entry_from_before_a_drain_is_never_used(start_router) -> None:
    env = await start_router()
    await _cache_on(env)
    assert (await env.client.get("/", headers=H)).status_code == 200
    env.router.core.cache._entries.clear()  # only nginx's entry could answer now
    assert (await env.client.get("/", headers=H)).status_code == 200
    assert env.api.calls["demo/c1"] == 1
    outcome = await env.router.core.drains.drain(11, "demo/c1")
    assert (outcome.result, outcome.waited_for) == ("clean", 0)
    assert (await env.client.get("/", headers=H)).status_code == 200
    assert env.api.calls["demo/c1"] == 2  # nginx's entry was void: the control service resumed


async def test_an_entry_is_not_used_once_the_lease_is_over(start_router) -> None:
    env = await start_router()
    await _cache_on(env)
    assert (await env.client.get("/", headers=H)).status_code == 200
    sent = len(env.worker_log.client_ports)
    env.api.refuse_heartbeats = True
    env.router.core.registration.lease_until = 0.0  # as when no heartbeat was answered for a lease
    await env.router.admin.lease(env.router.lease_left())  # what nginx is told within 0.2 s
    answer = await env.client.get("/", headers=H)
    assert answer.status_code == 503
    assert "has no lease with the control plane" in answer.text
    assert len(env.worker_log.client_ports) == sent  # the cached entry sent nothing


async def test_without_its_control_service_nginx_answers_503_also_for_what_it_relays(tmp_path) -> None:
    # nginx up, its control service gone (a port nothing listens on): a request it would route,
    # a WebSocket and a chunked upload it would relay, all get the same 503 and text (not
    # nginx's own 502 page).
    port = free_port()
    settings = RouterSettings(listen=f"127.0.0.1:{port}", database_url=None)
    layout = NginxLayout(tmp_path, f"127.0.0.1:{free_port()}", access_log=None, user="root" if os.geteuid() == 0 else None)
    nginx_config.write(settings, layout)
    nginx = NginxProcess(layout)
    await nginx.start()
    text = "the router's control service does not answer; retry shortly\n"
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            upgrade = {"connection": "upgrade", "upgrade": "websocket", "sec-websocket-version": "13",
                       "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ=="}  # fmt: skip

            async def chunks():
                yield b"abc"

            answers = [
                await client.get("/", headers=H),
                await client.get("/", headers={**H, **upgrade}),
                await client.post("/", headers=H, content=chunks()),
            ]
    finally:
        await nginx.stop()
    assert [(r.status_code, r.text, r.headers.get("retry-after")) for r in answers] == [(503, text, "2")] * 3


def test_the_request_log_is_off_with_a_warning_when_nginx_could_not_open_stderr(tmp_path) -> None:
    # nginx opens /dev/stderr by name; when that fails (stderr of another user; here a directory,
    # which not even root may open for writing) nginx would not start: the router turns the
    # request log off and says why instead.
    script = (
        "import logging, os; from pathlib import Path; from router.nginx.run import layout_for, stderr_reopens;"
        "from router.settings import RouterSettings; logging.basicConfig(level='INFO', filename='log.txt');"
        "print(stderr_reopens(), layout_for(RouterSettings(), Path('.')).access_log);"
        "os.dup2(os.open('.', os.O_RDONLY), 2);"
        "print(stderr_reopens(), layout_for(RouterSettings(), Path('.')).access_log)"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ran = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env={**os.environ, "PYTHONPATH": root},
                         capture_output=True, text=True)  # fmt: skip
    assert ran.stdout.splitlines() == ["True /dev/stderr", "False None"], ran.stderr
    assert "the request log is off: nginx cannot open /dev/stderr" in (tmp_path / "log.txt").read_text()


async def test_a_head_with_bare_line_feeds_reaches_the_worker_with_crlf_and_without_the_token_cookie(
    start_router,
) -> None:
    # nginx takes lines ended by LF alone; the worker gets each line ended by CRLF, the router's
    # own cookie gone and the other cookies and headers as sent.
    env = await start_router()
    env.api.access = {"mode": "token", "passCredential": False}
    env.api.grants = {"ate_0123456789ab_reaches-c1": {"demo/c1"}}
    host, port = env.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"GET /echo HTTP/1.1\nHost: x\nate-target-actor: demo/c1\nX-Other: one\n"
        b"Cookie: theme=dark; ate-token=ate_0123456789ab_reaches-c1; lang=en\nConnection: close\n\n"
    )
    answer = await asyncio.wait_for(reader.read(), 30)
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), answer
    seen = {k: v for k, v in json.loads(body)["headers"]}
    assert (seen["cookie"], seen["x-other"]) == ("theme=dark; lang=en", "one")
    assert seen["host"] == f"127.0.0.1:{env.worker.port}"
