"""Drain before checkpoint on the real stack (gVisor): a suspend with 20 requests in flight
through two router replicas (the second on the Python data path, then on the nginx one: mixed
replicas) cuts none of them and checkpoints; both replicas drained it; and
after an actor moved away and another actor took its old worker, no request of the first
reaches the second."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml

from tests.e2e.conftest import REPO, Stack
from tests.e2e.test_lifecycle import api, setup_actor
from tests.e2e.test_tour import metric

pytestmark = [pytest.mark.slow, pytest.mark.runsc]

SECOND_ROUTER_PORT = 28010
SECOND_METRICS_PORT = 29010
SECOND_DRAIN_TIMEOUT = 6.0
"""The second replica's --drain-timeout (the default is 10 s): the requests at work there when a
drain starts get this long, and the control plane waits for the longest of the replicas'
timeouts. Above the 3 s requests of the 20 in flight (about 2 s left of each when the drain
starts), below the default so that the cut request and the crash drain wait 4 s less."""


def wait_for(check: object, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {seconds}s")


@pytest.fixture(scope="module", params=["python", "nginx"])
def second_replica(
    stack: Stack, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[str, str]]:
    """Another router replica of the same stack (its own process and port, the stack's router
    token, no database: it learns of drains from its heartbeats only; ``SECOND_DRAIN_TIMEOUT``),
    on the data path of the parameter. Yields its URL and data path (its replica name is
    ``router-second-<data path>``)."""
    data_path = request.param
    log = tmp_path_factory.mktemp("router-2") / "router.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATE_")}
    env["ATE_ROUTER_API_TOKEN_FILE"] = str(stack.data_dir / "credentials" / "router.token")
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "ate", "router", "--listen", f"127.0.0.1:{SECOND_ROUTER_PORT}",
             "--api-server", stack.api, "--metrics-listen", f"127.0.0.1:{SECOND_METRICS_PORT}",
             "--replica-name", f"router-second-{data_path}", "--data-path", data_path,
             "--drain-timeout", str(SECOND_DRAIN_TIMEOUT)],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    try:
        wait_for(lambda: "router: ready" in log.read_text() or process.poll() is not None, 60, "second router ready")
        assert process.poll() is None, log.read_text()
        yield f"http://127.0.0.1:{SECOND_ROUTER_PORT}", data_path
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    # Stopped cleanly, it gave its lease back: no drain waits for it until the lease would end.
    assert f"router-second-{data_path}" not in live_replicas(stack), log.read_text()[-2000:]


def live_replicas(stack: Stack) -> set[str]:
    return {r["name"] for r in api(stack, "GET", "/v1/routers").json()["items"] if r["live"]}


def test_a_suspend_with_20_requests_in_flight_through_two_replicas_cuts_none(
    stack: Stack, second_replica: tuple[str, str]
) -> None:
    second_router, data_path = second_replica
    name = f"busy-{data_path}"
    path = setup_actor(stack, "drain2", name)
    target = {"ate-target-actor": f"drain2/{name}"}
    first = httpx.get(stack.router + "/", headers=target, timeout=30)
    assert first.json()["memory_count"] == 1
    # A replica stopped before (the other parameter) stays live until its lease ran out.
    wait_for(lambda: len(live_replicas(stack)) == 2, 30, "both router replicas registered")
    assert f"router-second-{data_path}" in live_replicas(stack)
    metrics = {stack.router: f"http://127.0.0.1:{stack.metrics_base}/metrics",
               second_router: f"http://127.0.0.1:{SECOND_METRICS_PORT}/metrics"}  # fmt: skip
    drains_before = {url: metric(m, "ate_router_drains_total") for url, m in metrics.items()}
    routers = [stack.router, second_router] * 10
    with ThreadPoolExecutor(max_workers=25) as pool:
        flying: list[Future[httpx.Response]] = [
            pool.submit(httpx.get, url + "/slow", params={"ms": "3000"}, headers=target, timeout=60) for url in routers
        ]
        time.sleep(1.0)  # a pause for all 20 to reach the actor, which holds each for 3 s
        suspend = pool.submit(stack.ate, "suspend", "actor", name, "-a", "drain2")
        wait_for(lambda: api(stack, "GET", path).json()["state"] == "SUSPENDING", 10, "suspending")
        arriving = [
            pool.submit(httpx.get, url + "/", headers=target, timeout=60) for url in (stack.router, second_router)
        ]
        answers = [f.result() for f in flying]
        suspend.result()  # the checkpoint succeeded (the CLI exits 0)
        late = [f.result() for f in arriving]
    assert [(r.status_code, r.json()) for r in answers] == [(200, {"slept_ms": 3000})] * 20  # none cut short
    for url, m in metrics.items():  # each replica drained it once, and cut nothing
        assert metric(m, "ate_router_drains_total") == drains_before[url] + 1
        assert metric(m, "ate_router_drains_total", result="cut") == 0
    # The two requests that came during the drain were held and served after the resume, by the
    # resumed actor (FULL snapshot: its count went on from 1).
    assert sorted(r.json()["memory_count"] for r in late) == [2, 3]
    assert api(stack, "GET", path).json()["state"] == "RUNNING"
    stack.ate("suspend", "actor", name, "-a", "drain2")



def test_a_request_cut_at_the_drain_timeout_leaves_a_snapshot_that_resumes(
    stack: Stack, second_replica: tuple[str, str]
) -> None:
    # A request still at work when the drain timeout ends is cut off; the snapshot taken right
    # after must still resume. With the connection only closed half-way (a FIN), every resume
    # of such a snapshot failed: the restored counter answered no connection
    # (tests/atelet/test_checkpoint_after_cut.py); the router now resets it.
    router, data_path = second_replica
    name = f"cut-{data_path}"
    path = setup_actor(stack, "drain3", name)
    target = {"ate-target-actor": f"drain3/{name}"}
    assert httpx.get(router + "/", headers=target, timeout=30).json()["memory_count"] == 1
    with ThreadPoolExecutor(max_workers=2) as pool:
        slow = pool.submit(httpx.get, router + "/slow", params={"ms": "30000"}, headers=target, timeout=60)
        time.sleep(1.0)  # at work inside the counter
        started = time.monotonic()
        stack.ate("suspend", "actor", name, "-a", "drain3")  # exits 0: the checkpoint succeeded
        suspended_after = time.monotonic() - started
        cut = slow.result()
    assert suspended_after >= SECOND_DRAIN_TIMEOUT  # it waited out that replica's --drain-timeout first
    assert cut.status_code == 503, cut.text
    assert cut.text.startswith(f"actor drain3/{name} is being suspended and this request did not finish")
    assert api(stack, "GET", path).json()["state"] == "SUSPENDED"
    resumed = httpx.get(router + "/", headers=target, timeout=60)
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["memory_count"] == 2  # the FULL snapshot's memory, plus this request
    stack.ate("suspend", "actor", name, "-a", "drain3")

def whoami_template(tmp: Path, who: str) -> Path:
    spec = yaml.safe_load((REPO / "examples/counter/template.yaml").read_text())
    spec["spec"]["containers"][0]["env"]["WHO"] = who
    path = tmp / f"who-{who}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_no_request_of_an_actor_reaches_the_actor_now_on_its_old_worker(stack: Stack, tmp_path: Path) -> None:
    stack.ate("create", "atespace", "wrong", check=False)
    for who in ("first", "second"):
        stack.ate("create", "template", f"who-{who}", "-a", "wrong", "-f", str(whoami_template(tmp_path, who)))
    for name, template in (("a", "who-first"), ("b", "who-second")):
        stack.ate("create", "actor", name, "-a", "wrong", "--template", template)
    actor_a = "/v1/atespaces/wrong/actors/a"
    target_a = {"ate-target-actor": "wrong/a"}
    assert httpx.get(stack.router + "/whoami", headers=target_a, timeout=30).json() == {"who": "first"}
    answers: list[tuple[int, str]] = []
    stop = threading.Event()

    def hammer() -> None:  # requests for a, without pause, all along
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                r = client.get(stack.router + "/whoami", headers=target_a)
                answers.append((r.status_code, r.text))

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        old_worker = api(stack, "GET", actor_a).json()["worker"]
        for _ in range(10):  # suspend a until its resume (by the hammering requests) moves it away
            stack.ate("suspend", "actor", "a", "-a", "wrong")
            wait_for(lambda: api(stack, "GET", actor_a).json()["state"] == "RUNNING", 30, "a resumed by its requests")
            now = api(stack, "GET", actor_a).json()["worker"]
            if now["name"] != old_worker["name"]:
                break
            old_worker = now
        else:
            raise AssertionError("actor a never moved to the other worker in 10 suspends")
        # b takes a's old worker: the only free one (a holds the other).
        b = api(stack, "POST", "/v1/atespaces/wrong/actors/b/resume", json={})
        assert b.status_code == 200, b.text
        assert (b.json()["worker"]["name"], b.json()["worker"]["ip"]) == (old_worker["name"], old_worker["ip"])
        time.sleep(2.0)  # a's requests keep coming while b serves at a's old address
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    served = [text for status, text in answers if status == 200]
    assert served and all(text.strip() == '{"who":"first"}' for text in served), {t for t in served}
    assert all(status == 200 for status, _ in answers), {s for s, _ in answers}  # held, never failed
    assert httpx.get(stack.router + "/whoami", headers={"ate-target-actor": "wrong/b"}, timeout=30).json() == {
        "who": "second"
    }
    for name in ("a", "b"):
        stack.ate("suspend", "actor", name, "-a", "wrong")


def kill_sandbox_of(stack: Stack, worker: str) -> None:
    """Kill the running sandbox on `worker` as a crash would (the atelet sees it exit)."""
    root = stack.data_dir / "atelet" / "runsc"
    listed = subprocess.run(
        ["runsc", "--root", str(root), "list", "-format=json"], capture_output=True, text=True, check=True
    )
    [container] = [
        c["id"] for c in json.loads(listed.stdout or "[]") if c["id"].startswith(worker) and c["status"] == "running"
    ]
    subprocess.run(["runsc", "--root", str(root), "kill", container, "KILL"], check=True)


def test_after_a_crash_no_request_of_the_actor_reaches_the_actor_now_on_its_worker(
    stack: Stack, second_replica: tuple[str, str], tmp_path: Path
) -> None:
    """A request for actor a, looked up while a ran, whose body is still arriving when a's sandbox
    crashes and b is placed on a's worker (c holds the other one), is never delivered to b: the
    crash drains the routers, and the worker takes b only once they drained a."""
    router, data_path = second_replica
    space = f"crashed-{data_path}"
    stack.ate("create", "atespace", space, check=False)
    for who in ("first", "second"):
        stack.ate("create", "template", f"who-{who}", "-a", space, "-f", str(whoami_template(tmp_path, who)))
    for name, template in (("a", "who-first"), ("b", "who-second"), ("c", "who-first")):
        stack.ate("create", "actor", name, "-a", space, "--template", template)
    base = f"/v1/atespaces/{space}/actors"
    assert httpx.get(router + "/whoami", headers={"ate-target-actor": f"{space}/a"}, timeout=30).json() == {
        "who": "first"
    }
    home = api(stack, "GET", f"{base}/a").json()["worker"]
    assert api(stack, "POST", f"{base}/c/resume", json={}).status_code == 200  # c takes the other worker

    url = httpx.URL(router)
    client = socket.create_connection((url.host, url.port), timeout=60)
    try:
        client.sendall(
            f"POST /whoami HTTP/1.1\r\nHost: x\r\nate-target-actor: {space}/a\r\nContent-Length: 4\r\n"
            "Connection: close\r\n\r\nab".encode()
        )
        time.sleep(1.0)  # the router found a RUNNING on `home` and waits for the rest of the body
        kill_sandbox_of(stack, home["name"])
        wait_for(lambda: api(stack, "GET", f"{base}/a").json()["state"] == "CRASHED", 30, "a crashed")
        deadline = time.monotonic() + 60
        while True:  # b goes to a's old worker as soon as placement may put it there
            resumed = api(stack, "POST", f"{base}/b/resume", json={})
            if resumed.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert resumed.status_code == 200, resumed.text
        assert resumed.json()["worker"]["ip"] == home["ip"]
        client.sendall(b"cd")
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    finally:
        client.close()
    status = answer.split(b"\r\n", 1)[0]
    assert b"second" not in answer, answer  # b never saw a's request
    # Both data paths stream the body: a got the head before its crash, and its handler
    # answers without reading the body; or the crash cut the exchange.
    assert answer.endswith(b'{"who":"first"}\n') or not status.endswith(b"200 OK"), answer
    assert httpx.get(router + "/whoami", headers={"ate-target-actor": f"{space}/b"}, timeout=30).json() == {
        "who": "second"
    }
    for name in ("b", "c"):
        stack.ate("suspend", "actor", name, "-a", space)
