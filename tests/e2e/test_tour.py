"""The README's five-minute tour, end to end on real gVisor workers, plus the lock contracts.

Expected counts come from the counter's definition (examples/counter): each request to `/`
adds one to a memory counter and one to a file counter on the durable dir. FULL snapshots keep
both across a suspend; DATA snapshots keep only the file.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import urllib.parse

import httpx
import pytest

from tests.e2e.conftest import REPO, Stack

pytestmark = [pytest.mark.slow, pytest.mark.runsc]


def get(stack: Stack, actor: str) -> dict[str, object]:
    response = httpx.get(stack.router + "/", headers={"ate-target-actor": actor}, timeout=30)
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def actor_json(stack: Stack, name: str, atespace: str = "demo") -> dict[str, object]:
    data: dict[str, object] = json.loads(stack.ate("get", "actor", name, "-a", atespace, "-o", "json").stdout)
    return data


def workflows(stack: Stack, query: str) -> list[dict[str, object]]:
    """Executions matching a visibility query, through the Temporal UI's own HTTP API."""
    url = f"{stack.temporal_ui}/api/v1/namespaces/default/workflows?query={urllib.parse.quote(query)}"
    executions: list[dict[str, object]] = httpx.get(url, timeout=10).json().get("executions") or []
    return executions


def test_tour_full_scope(stack: Stack) -> None:
    stack.ate("create", "atespace", "demo")
    created = stack.ate("create", "template", "counter", "-a", "demo", "-f", "examples/counter/template.yaml")
    assert "Ready" in created.stdout, created.stdout
    stack.ate("create", "actor", "c1", "-a", "demo", "--template", "counter")
    assert actor_json(stack, "c1")["state"] == "SUSPENDED"

    first, second = get(stack, "demo/c1"), get(stack, "demo/c1")
    assert (first["memory_count"], first["file_count"]) == (1, 1)
    assert (second["memory_count"], second["file_count"]) == (2, 2)
    running = actor_json(stack, "c1")
    assert running["state"] == "RUNNING"
    assert isinstance(running["worker"], dict) and first["ip"] == running["worker"]["ip"]

    stack.ate("suspend", "actor", "c1", "-a", "demo")
    suspended = actor_json(stack, "c1")
    assert (suspended["state"], suspended["worker"]) == ("SUSPENDED", None)
    workers = json.loads(stack.ate("get", "workers", "-o", "json").stdout)
    items = workers["items"] if isinstance(workers, dict) else workers
    assert items and all(w["actors"] == [] for w in items)

    third = get(stack, "demo/c1")
    assert (third["memory_count"], third["file_count"]) == (3, 3)

    runs = workflows(stack, 'AteActor="c1" AND AteAtespace="demo"')
    kinds = {str(r.get("type", {}).get("name")) for r in runs if isinstance(r.get("type"), dict)}
    assert {"ResumeActor", "SuspendActor"} <= kinds, runs
    stack.ate("suspend", "actor", "c1", "-a", "demo")  # the stack has two workers: give the place back


def test_tour_data_scope(stack: Stack) -> None:
    stack.ate("create", "atespace", "data", check=False)
    stack.ate("create", "template", "counter-data", "-a", "data", "-f", "examples/counter/template-data.yaml")
    stack.ate("create", "actor", "d1", "-a", "data", "--template", "counter-data")
    assert (get(stack, "data/d1")["memory_count"], get(stack, "data/d1")["memory_count"]) == (1, 2)
    stack.ate("suspend", "actor", "d1", "-a", "data")
    after = get(stack, "data/d1")
    assert (after["memory_count"], after["file_count"]) == (1, 3)  # memory restarts, the file continues
    stack.ate("suspend", "actor", "d1", "-a", "data")


def test_concurrent_requests_cause_one_restore(stack: Stack) -> None:
    stack.ate("create", "atespace", "conc", check=False)
    stack.ate("create", "template", "counter", "-a", "conc", "-f", "examples/counter/template.yaml", check=False)
    stack.ate("create", "actor", "c20", "-a", "conc", "--template", "counter")
    before = len(workflows(stack, 'AteActor="c20" AND AteOperation="ResumeActor"'))

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(
                *(client.get(stack.router + "/", headers={"ate-target-actor": "conc/c20"}) for _ in range(20))
            )

    responses = asyncio.run(burst())
    assert [r.status_code for r in responses] == [200] * 20
    counts = sorted(int(r.json()["memory_count"]) for r in responses)
    assert counts == list(range(1, 21))  # one sandbox served all twenty, each request counted once
    time.sleep(1.0)  # visibility is eventually consistent (~ms)
    after = len(workflows(stack, 'AteActor="c20" AND AteOperation="ResumeActor"'))
    assert after - before == 1
    stack.ate("suspend", "actor", "c20", "-a", "conc")


def test_other_operation_during_resume_gets_409(stack: Stack) -> None:
    stack.ate("create", "atespace", "lock", check=False)
    stack.ate("create", "template", "counter", "-a", "lock", "-f", "examples/counter/template.yaml", check=False)
    stack.ate("create", "actor", "l1", "-a", "lock", "--template", "counter")
    base = f"{stack.api}/v1/atespaces/lock/actors/l1"
    for _ in range(5):
        resume = subprocess.Popen(
            ["curl", "-s", "-XPOST", "-H", f"Authorization: Bearer {stack.token}", base + "/resume"],
            stdout=subprocess.PIPE,
        )
        state = "SUSPENDED"
        deadline = time.monotonic() + 10
        while state == "SUSPENDED" and time.monotonic() < deadline:
            state = httpx.get(base, headers=stack.headers).json()["state"]
        if state == "RESUMING":
            refused = httpx.post(base + "/suspend", json={}, headers=stack.headers)
            resume.wait(60)
            assert refused.status_code == 409, refused.text
            body = refused.json()
            assert body["message"] == "another operation is in progress for this actor"
            assert body["details"]["operation"] == "ResumeActor"
            assert httpx.get(base, headers=stack.headers).json()["state"] == "RUNNING"  # the refusal changed nothing
            httpx.post(base + "/suspend", json={}, timeout=60, headers=stack.headers)
            return
        resume.wait(60)
        httpx.post(base + "/suspend", json={}, timeout=60, headers=stack.headers)
    pytest.fail("never observed the actor in RESUMING")


def test_router_errors_name_the_actor(stack: Stack) -> None:
    anonymous = httpx.get(stack.router + "/", headers={"ate-target-actor": "demo/nobody"})
    assert anonymous.status_code == 401  # to a caller without access, unknown looks like protected
    assert anonymous.text.startswith("actor demo/nobody: not found, or it needs a bearer token")
    missing = httpx.get(stack.router + "/", headers={"ate-target-actor": "demo/nobody", **stack.headers})
    assert missing.status_code == 404 and "demo/nobody" in missing.text
    assert "ate create actor nobody -a demo" in missing.text
    malformed = httpx.get(stack.router + "/", headers={"ate-target-actor": "Demo"})
    assert malformed.status_code == 400 and "Demo" in malformed.text


def test_bad_template_is_refused_with_every_field_named(stack: Stack) -> None:
    stack.ate("create", "atespace", "bad", check=False)
    bad = REPO / ".ate-test-bad-template.yaml"
    bad.write_text(
        "spec:\n"
        "  containers:\n"
        "  - name: c\n"
        "    image: registry.example.com/Team/nginx\n"  # an upper-case path: not a reference (nothing is asked)
        "    wakeupProbe: {httpGet: {path: /readyz, port: 70000}}\n"
        "    volumeMounts: [{name: nope, mountPath: /data}]\n"
        "  resources: {limits: {cpu: -1}}\n"
        "  snapshotConfig: {onPause: Data, onCommit: Full}\n"
        "  colour: blue\n"
    )
    try:
        refused = stack.ate("create", "template", "t1", "-a", "bad", "-f", str(bad), check=False)
    finally:
        bad.unlink()
    assert refused.returncode != 0
    message = refused.stderr
    for field in ("image", "port", "cpu", "colour", "onCommit"):
        assert field in message, message
    assert stack.ate("get", "templates", "-a", "bad", "-o", "json").stdout.count('"name"') == 0


def metric(url: str, name: str, **labels: str) -> float:
    """The value of one Prometheus sample (0 when absent), read from a /metrics page."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    total = 0.0
    for line in httpx.get(url, timeout=10).text.splitlines():
        if not line.startswith(name + "{") and line.split(" ")[0] != name:
            continue
        sample, _, value = line.rpartition(" ")
        found = sample[len(name) + 1 : -1] if "{" in sample else ""
        pairs = sorted(p for p in found.split(",") if p)
        if all(p in pairs for p in wanted.split(",") if p):
            total += float(value)
    return total


def test_every_process_exports_operation_metrics(stack: Stack) -> None:
    stack.ate("create", "atespace", "metrics", check=False)
    stack.ate("create", "template", "counter", "-a", "metrics", "-f", "examples/counter/template.yaml", check=False)
    stack.ate("create", "actor", "m1", "-a", "metrics", "--template", "counter")
    api = stack.api + "/metrics"
    worker = f"http://127.0.0.1:{stack.metrics_base + 1}/metrics"
    router = f"http://127.0.0.1:{stack.metrics_base}/metrics"
    atelet = f"http://127.0.0.1:{stack.metrics_base + 85}/metrics"
    before = {
        "api": metric(api, "ate_api_operations_total", operation="ResumeActor", outcome="ok"),
        "worker": metric(worker, "ate_operations_total", operation="ResumeActor", outcome="ok"),
        "router": metric(router, "ate_router_requests_total", outcome="parked_ok"),
    }
    get(stack, "metrics/m1")  # one resume through the router
    assert metric(api, "ate_api_operations_total", operation="ResumeActor", outcome="ok") == before["api"] + 1
    assert metric(worker, "ate_operations_total", operation="ResumeActor", outcome="ok") == before["worker"] + 1
    assert metric(worker, "ate_operation_duration_seconds_count", operation="ResumeActor", outcome="ok") >= 1
    assert metric(router, "ate_router_requests_total", outcome="parked_ok") == before["router"] + 1  # it waited for the resume
    assert metric(atelet, "ate_atelet_operations_total") >= 1
    stack.ate("suspend", "actor", "m1", "-a", "metrics")
    assert metric(api, "ate_workers", pool="default", state="idle") == 2  # both workers free again


def test_no_room_is_a_503_that_names_the_placement_check(stack: Stack) -> None:
    stack.ate("create", "atespace", "full", check=False)
    stack.ate("create", "template", "counter", "-a", "full", "-f", "examples/counter/template.yaml", check=False)
    for name in ("n1", "n2", "n3"):
        stack.ate("create", "actor", name, "-a", "full", "--template", "counter")
    get(stack, "full/n1")
    get(stack, "full/n2")  # the stack's two workers have one place each: both taken now
    started = time.monotonic()
    refused = httpx.get(stack.router + "/", headers={"ate-target-actor": "full/n3"}, timeout=60)
    parked = time.monotonic() - started
    assert refused.status_code == 503, refused.text
    assert "no worker has room for the actor full/n3: 2 workers: 2 busy (a worker hosts one actor)" in refused.text
    assert refused.headers.get("retry-after") is not None
    assert parked >= 4.5  # parked for its 5 s budget before giving up, as a worker might have freed up
    assert actor_json(stack, "n3", "full")["state"] == "SUSPENDED"  # the refusal changed nothing
    stack.ate("suspend", "actor", "n1", "-a", "full")
    assert get(stack, "full/n3")["memory_count"] == 1  # a place is free: n3 runs
    stack.ate("suspend", "actor", "n2", "-a", "full")
    stack.ate("suspend", "actor", "n3", "-a", "full")
