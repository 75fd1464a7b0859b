"""`python -m bench freeze`: the hot tier on one node: a request to a frozen counter (Thaw, then
the first `GET /`) against a request to a running one, measured in the same run.

An atelet ``Node`` in this process (no gRPC, no control plane: what the atelet itself does,
operation log and worker record included) runs the example counter on a gVisor worker. Per
cycle, interleaved: one `GET /` to the running counter on a fresh connection (the baseline), then
Freeze, a pause, and Thaw followed at once by a `GET /` (what the router's request to a frozen
actor costs on the node). Also reported: Freeze and Thaw each (the calls, and the kernel's part
the driver measured), and the CPU time the sandbox's cgroup used while frozen. Issue 27's goal:
a request to a frozen actor within 20 ms p95 of a request to a running one.

`--through-router` measures the same end to end on a real `ate dev --workers 1` (bench.stack): per
cycle a request through the router to the RUNNING counter (the baseline, its upstream cached),
then `ate freeze` through the API (answered once FROZEN), a pause, and a request through the router
to the FROZEN actor: the router's resume call, the API's ResumeActor workflow whose one activity
thaws the sandbox in place and commits RUNNING, and the proxied `GET /`.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.actors import COUNTER
from bench.common import ROOT, Log, machine, ms, summary, table, write_result

ACTOR = ("bench", "frozen1")


async def _get(ip: str) -> float:
    """One `GET /` on a fresh connection, closed afterwards; returns its seconds."""
    start = time.monotonic()
    reader, writer = await asyncio.open_connection(ip, 8080)
    writer.write(b"GET / HTTP/1.1\r\nHost: counter\r\nConnection: close\r\n\r\n")
    await writer.drain()
    answer = await reader.read()
    writer.close()
    if not answer.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"counter answered {answer[:80]!r}")
    return time.monotonic() - start


def _cpu_ns(pid: int) -> int:
    """cpuacct.usage (v1) or cpu.stat usage_usec (v2) of process ``pid``'s cgroup, ns."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):
            return int((Path("/sys/fs/cgroup") / controllers / path.lstrip("/") / "cpuacct.usage").read_text())
        if controllers == "":
            stat = (Path("/sys/fs/cgroup") / path.lstrip("/") / "cpu.stat").read_text().split()
            if "usage_usec" in stat:
                return int(stat[stat.index("usage_usec") + 1]) * 1000
    raise RuntimeError(f"no CPU accounting for process {pid}")


async def _run(cycles: int, warmup: int, log: Log) -> dict[str, Any]:
    from atelet.main import pools_of
    from atelet.node import Node
    from atelet.proto import atelet_pb2 as pb
    from atelet.settings import AteletSettings

    base = Path(tempfile.mkdtemp(prefix="ate-bf-", dir="/tmp"))
    settings = AteletSettings(node="benchfreeze", listen="127.0.0.1:0", metrics_listen="", state_dir=base / "state",
                              snapshot_roots=[base / "snapshots"], image_roots=[ROOT], workers=1,
                              subnet="10.203.9.0/24")  # fmt: skip
    node = Node(settings, pools_of(settings))
    ref = pb.ActorRef(atespace=ACTOR[0], name=ACTOR[1])
    spec = pb.WorkloadSpec(containers=[pb.Container(
        name="counter", image="oci:examples/counter/oci:latest", command=["/counter"],
        env={"DATA_DIR": "/data", "PORT": "8080"}, wakeup_probe=pb.HttpGetProbe(path="/readyz", port=8080),
        volume_mounts=[pb.VolumeMount(name="data", mount_path="/data")])],
        volumes=[pb.Volume(name="data", durable_dir=True)], cpu_millis=500, memory_bytes=256 * 2**20)
    figures: dict[str, list[float]] = {k: [] for k in ("get_running", "thaw_get", "freeze_call", "freeze_kernel",
                                                       "thaw_call", "thaw_kernel", "frozen_cpu")}
    method = ""
    await node.start()
    try:
        run = await node.run(pb.RunRequest(operation_id=f"run-{uuid.uuid4().hex[:8]}", worker="default-0",
                                           actor=ref, spec=spec, probe_timeout_seconds=30))
        worker = node.workers["default-0"]
        driver = node.drivers["gvisor"]
        pid = driver.runsc.saved_pid(worker.container_id or "")  # type: ignore[attr-defined]
        for i in range(warmup + cycles):
            baseline = await _get(run.worker_ip)
            start = time.monotonic()
            frozen = await node.freeze(pb.FreezeRequest(operation_id=f"f-{i}-{uuid.uuid4().hex[:8]}",
                                                        worker="default-0", actor=ref))
            freeze_call = time.monotonic() - start
            before = _cpu_ns(pid)
            await asyncio.sleep(0.2)
            frozen_cpu = _cpu_ns(pid) - before
            start = time.monotonic()
            thawed = await node.thaw(pb.ThawRequest(operation_id=f"t-{i}-{uuid.uuid4().hex[:8]}", worker="default-0",
                                                    actor=ref))
            thaw_call = time.monotonic() - start
            await _get(run.worker_ip)
            thaw_get = time.monotonic() - start
            method = frozen.method
            if i >= warmup:
                for key, value in (("get_running", baseline), ("thaw_get", thaw_get), ("freeze_call", freeze_call),
                                   ("freeze_kernel", frozen.freeze_seconds), ("thaw_call", thaw_call),
                                   ("thaw_kernel", thawed.thaw_seconds), ("frozen_cpu", frozen_cpu / 1e9)):
                    figures[key].append(value)
            await asyncio.sleep(0.05)
        log(f"{cycles} cycles done ({method})")
    finally:
        await node.stop()
        shutil.rmtree(base, ignore_errors=True)
    return {"method": method, "figures": figures}


def _through_router(cycles: int, warmup: int, log: Log) -> dict[str, Any]:
    """The end-to-end cycles on a real stack; returns the figures (seconds) and the histories' thaws."""
    import httpx

    from ate.cli.client import ApiClient
    from ate.cli.manifest import load_template_spec
    from bench import stack as stack_mod

    stack = stack_mod.start(workers=1, log=log)
    figures: dict[str, list[float]] = {"get_running": [], "get_frozen": [], "freeze_call": []}
    try:
        with ApiClient(stack.api_url, timeout=300, token=stack.token) as cli:
            cli.create_atespace(ACTOR[0])
            tpl = cli.create_template(ACTOR[0], "counter", load_template_spec(COUNTER),
                                      wait=True)  # fmt: skip
            if tpl.get("phase") != "Ready":
                raise RuntimeError(f"template not Ready: {tpl}")
            cli.create_actor(ACTOR[0], ACTOR[1], "counter", {})
        target = {"ate-target-actor": f"{ACTOR[0]}/{ACTOR[1]}"}
        actor_url = f"{stack.api_url}/v1/atespaces/{ACTOR[0]}/actors/{ACTOR[1]}"
        # A fresh connection per request, as in the node-side mode: no keep-alive to favour either.
        limits = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(timeout=30, limits=limits) as proxy, httpx.Client(headers=stack.headers, timeout=60) as api:
            count = -1

            def request() -> float:
                nonlocal count
                start = time.monotonic()
                answer = proxy.get(stack.router_url + "/", headers=target)
                seconds = time.monotonic() - start
                if answer.status_code != 200:
                    raise RuntimeError(f"router answered {answer.status_code}: {answer.text[:200]}")
                memory = int(answer.json()["memory_count"])
                if count >= 0 and memory != count + 1:
                    raise RuntimeError(f"memory_count {memory} after {count}: the thaw lost the actor's memory")
                count = memory
                return seconds

            request()  # the first request resumes the actor from its golden snapshot (not measured)
            for i in range(warmup + cycles):
                running = request()
                start = time.monotonic()
                frozen = api.post(actor_url + "/freeze", json={})
                freeze_call = time.monotonic() - start
                if frozen.status_code != 200 or frozen.json().get("state") != "FROZEN":
                    raise RuntimeError(f"freeze answered {frozen.status_code}: {frozen.text[:200]}")
                time.sleep(0.2)
                thawed = request()
                if i >= warmup:
                    figures["get_running"].append(running)
                    figures["get_frozen"].append(thawed)
                    figures["freeze_call"].append(freeze_call)
                time.sleep(0.05)
            log(f"{cycles} cycles through the router done (memory_count {count})")
    finally:
        stack.stop()
    return {"method": "ate freeze", "figures": figures}


def _rows(s: dict[str, dict[str, float]], lines: tuple[tuple[str, str], ...]) -> list[list[Any]]:
    """The table's rows: per (label, figure) its p50, p95 and max in ms."""
    return [[name, ms(s[key]["p50"]), ms(s[key]["p95"]), ms(s[key]["max"])] for name, key in lines]


def _print(name: str, title: str, rows: list[list[Any]], key: str, data: dict[str, Any]) -> None:
    """Print the title, the table, where the results went and the KEY line."""
    path = write_result(name, {"machine": machine(), **data})
    print("\n".join([title, table(["ms", "p50", "p95", "max"], rows), f"results: {path}", key]))


def run_through_router(cycles: int, warmup: int, log: Log) -> None:
    """Runs the end-to-end mode and prints its table and KEY line (see the module doc)."""
    result = _through_router(cycles, warmup, log)
    s = {k: summary(v) for k, v in result["figures"].items()}
    rows = _rows(s, (
        ("request to the RUNNING counter (router, cached upstream)", "get_running"),
        ("request to the FROZEN counter (router resume, thaw, proxy)", "get_frozen"),
        ("ate freeze through the API (answered FROZEN)", "freeze_call"),
    ))  # fmt: skip
    gap = ms(s["get_frozen"]["p95"] - s["get_running"]["p95"])
    key = (
        f"KEY freeze through the router: FROZEN p50/p95 {ms(s['get_frozen']['p50']):.1f}/{ms(s['get_frozen']['p95']):.1f}"
        f" ms vs RUNNING {ms(s['get_running']['p50']):.1f}/{ms(s['get_running']['p95']):.1f} ms "
        f"(p95 gap {gap:.1f} ms, goal < 20)"
    )
    title = f"bench freeze --through-router: {cycles} cycles, ate dev --workers 1, gVisor counter"
    _print("freeze-router", title, rows, key, {"cycles": cycles, "summary": s, **result})


def run(cycles: int, warmup: int, log: Log) -> None:
    """Runs the benchmark and prints its table and KEY line (see the module doc)."""
    result = asyncio.run(_run(cycles, warmup, log))
    s = {k: summary(v) for k, v in result["figures"].items()}
    rows = _rows(s, (
        ("GET / to the running counter (baseline)", "get_running"),
        ("Thaw + GET / to the frozen counter", "thaw_get"),
        ("Freeze call (record, kernel, oplog)", "freeze_call"),
        ("  of which the kernel's freeze", "freeze_kernel"),
        ("Thaw call (kernel, record, oplog)", "thaw_call"),
        ("  of which the kernel's thaw", "thaw_kernel"),
        ("sandbox CPU while frozen 0.2 s", "frozen_cpu"),
    ))  # fmt: skip
    gap = ms(s["thaw_get"]["p95"] - s["get_running"]["p95"])
    key = (
        f"KEY freeze: thaw+GET p50/p95 {ms(s['thaw_get']['p50']):.1f}/{ms(s['thaw_get']['p95']):.1f} ms vs running GET "
        f"{ms(s['get_running']['p50']):.1f}/{ms(s['get_running']['p95']):.1f} ms (p95 gap {gap:.1f} ms, goal < 20); "
        f"freeze {ms(s['freeze_kernel']['p50']):.2f} ms, thaw {ms(s['thaw_kernel']['p50']):.2f} ms (kernel, p50); "
        f"CPU while frozen max {ms(s['frozen_cpu']['max']):.3f} ms"
    )
    title = f"bench freeze: {cycles} cycles, gVisor counter frozen by {result['method']}"
    _print("freeze", title, rows, key, {"cycles": cycles, "summary": s, **result})
