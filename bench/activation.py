"""Benchmark 1: activation latency of a suspended FULL-scope counter actor, against its floors.

Per cycle: suspend the actor through the API, wait 0.3 s (the router hears of the change by
LISTEN/NOTIFY), then time one `GET /` through the router on a fresh connection until the
response. In the same run, interleaved (one of each per cycle while the actor is suspended), two baselines on the same snapshot kind of the same counter:

- atelet: an atelet's gRPC `Restore` of the actor's latest snapshot, then the first `GET /` to
  the worker IP (no Temporal, no Postgres, no router, no API). It is an atelet of its own (same
  code, same snapshot and image roots, not registered with the API): a sandbox restored behind
  the control plane's back on one of its workers would be fenced by the next heartbeat as a
  stray, and the actor's own resume would then find no worker for a few seconds;
- floor: raw `runsc restore` of a checkpoint of the same actor written by `runsc checkpoint` with
  runsc's default flags (not the atelet's checkpoint: the atelet may write its checkpoints with
  other flags, e.g. `--checkpoint-compression none`, and the floor must stay "runsc as a user
  would call it"), into a prepared network namespace (made with atelet.netns; bundle from
  atelet.bundle; image from atelet.images; the global runsc flags of atelet.runsc), then the
  first `GET /` (no control plane at all), then a default `runsc checkpoint` of that sandbox
  (timed: the floor of a suspend) into the checkpoint the next cycle's floor restores. The chain
  starts from the actor's own snapshot, restored and checkpointed once before the first cycle.

The overhead is broken into steps from data the code records anyway: Temporal history event
times (workflow started, first workflow task started, completed), the results of the regular
activities (place_and_restore's placement seconds and its RUNNING commit's time,
`marked_running_at`), the local-activity markers of a run that took its steps one by one, and the
atelet's own fetch/restore/probe seconds returned in the ResumeActor result.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from bench import stack as stack_mod
from bench.actors import COUNTER, call, setup, workflow_steps
from bench.common import ROOT, Log, machine, measurements, ms, summary, table, write_result
from domain.activity_names import Activity

if TYPE_CHECKING:
    from atelet.netns import WorkerNet
    from atelet.proto import atelet_pb2 as pb
    from atelet.runsc import Runsc

ATESPACE, ACTOR = "bench", "c1"
STEPS = [
    "front",
    "dispatch",
    "placement",
    "atelet_fetch",
    "atelet_restore",
    "atelet_probe",
    "atelet_rpc",
    "finalize",
    "answer",
]
STEP_DOC = {
    "front": "client send -> WorkflowExecutionStarted (router parse, router->API, API get_actor, start_workflow)",
    "dispatch": "WorkflowExecutionStarted -> first WorkflowTaskStarted (matching, poll)",
    "placement": "placement + bind, one Postgres transaction (in place_and_restore; or the begin_resume "
    "local activity, until its completion)",
    "atelet_fetch": "atelet: verify manifest + extract durable dirs",
    "atelet_restore": "atelet: netns ensure + runsc restore",
    "atelet_probe": "atelet: wakeup probe until 200",
    "atelet_rpc": "first workflow task started -> the RUNNING commit's start, minus placement/fetch/restore/"
    "probe (the workflow task, the hand-off to the activity, gRPC, the atelet's checks, bundle write)",
    "finalize": "the RUNNING commit in the restore's activity (a run that fell back to the workflow's "
    "finish_resume step: atelet_start completed -> finish_resume done)",
    "answer": "RUNNING commit -> response (its NOTIFY or the workflow's completion, whichever reaches the API "
    "first; API get_actor, router proxy, actor reply)",
}


async def _get(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> httpx.Response:
    return await client.get(url, headers=headers)


async def ours(
    stack: stack_mod.Stack, cycles: int, warmup: int, log: Log, between: Callable[[int], Awaitable[None]] | None = None
) -> dict[str, Any]:
    from temporalio.client import Client

    temporal = await Client.connect(stack.temporal_address)
    api = httpx.AsyncClient(base_url=stack.api_url, headers=stack.headers, timeout=120)
    proxy = httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_keepalive_connections=0))
    headers = {"ate-target-actor": f"{ATESPACE}/{ACTOR}"}
    rows: list[dict[str, Any]] = []
    suspend_s: list[float] = []
    last_count = None
    try:
        r = await _get(proxy, stack.router_url + "/", headers)  # first resume: from the golden snapshot
        r.raise_for_status()
        for i in range(warmup + cycles):
            await asyncio.sleep(0.1)
            t = time.monotonic()
            await call(api, "suspend", ATESPACE, ACTOR)
            suspend_s.append(time.monotonic() - t)
            if between is not None and i >= warmup:
                await between(i)  # the baselines, on the same snapshot kind, while the actor is suspended
            await asyncio.sleep(0.3)
            t_send = time.time()
            r = await _get(proxy, stack.router_url + "/", headers)
            t_recv = time.time()
            if r.status_code != 200:
                raise RuntimeError(f"cycle {i}: router answered {r.status_code}: {r.text[:300]}")
            count = r.json()["memory_count"]
            if last_count is not None and count != last_count + 1:
                raise RuntimeError(f"cycle {i}: memory_count {count} after {last_count}: memory not restored")
            last_count = count
            if i < warmup:
                continue
            # The API may answer at finish_resume's commit, before the workflow completed.
            await temporal.get_workflow_handle(f"actor/{ATESPACE}/{ACTOR}").result()
            row = step_row(await workflow_steps(temporal, f"actor/{ATESPACE}/{ACTOR}"), t_send, t_recv)
            rows.append(row)
            if (i - warmup + 1) % 10 == 0:
                log(f"activation: {i - warmup + 1}/{cycles} cycles, last {ms(row['total']):.0f} ms")
    finally:
        await api.aclose()
        await proxy.aclose()
    return {"rows": rows, "suspend_s": suspend_s}


def step_row(h: dict[str, Any], t_send: float, t_recv: float) -> dict[str, Any]:
    """One cycle's ``STEPS`` (seconds) from its ResumeActor history ``h`` (bench.actors.workflow_steps)
    and the request's send and receive times (Unix seconds), plus ``total`` and ``before_completion``.

    Two shapes: one ``place_and_restore`` activity (placement, restore and the RUNNING commit; its
    placement is the store transaction's own time, and ``atelet_rpc`` runs from the first workflow
    task's start to the commit's start, minus placement, fetch, restore and probe), or the steps
    one by one (a ``begin_resume`` local activity, then ``atelet_start``)."""
    la = dict(h["la"])
    timings = (h.get("result") or {}).get("timings", {})
    fetch, restore, probe = (timings.get(f"atelet_{k}", 0.0) for k in ("fetch", "restore", "probe"))
    results = h.get("results") or {}
    row = {
        "total": t_recv - t_send,
        "front": h["started"] - t_send,
        "dispatch": h["task_started"] - h["started"],
        "atelet_fetch": fetch,
        "atelet_restore": restore,
        "atelet_probe": probe,
        "before_completion": t_recv < h["completed"],  # answered at the commit's NOTIFY
    }
    one = results.get(Activity.PLACE_AND_RESTORE)
    if one is not None and Activity.BEGIN_RESUME not in la:  # one activity: placement timed inside it
        step, placement = Activity.PLACE_AND_RESTORE.value, one.get("placement_seconds", 0.0)
        origin, restored = h["task_started"] + placement, one.get("restored") or {}
    else:  # step by step: the begin_resume marker ends the placement
        step, placement = Activity.ATELET_START.value, la[Activity.BEGIN_RESUME] - h["task_started"]
        origin, restored = la[Activity.BEGIN_RESUME], results.get(Activity.ATELET_START) or {}
    marked = restored.get("marked_running_at")
    if marked is not None:  # the activity's own RUNNING commit
        finalize = restored.get("timings", {}).get("finalize", 0.0)
        rpc_end, answered_from = marked - finalize, marked
    else:  # the workflow's finish_resume step after the activity's completion
        finalize = la[Activity.FINISH_RESUME] - la[step]
        rpc_end, answered_from = la[step], la[Activity.FINISH_RESUME]
    return row | {
        "placement": placement,
        "atelet_rpc": rpc_end - origin - (fetch + restore + probe),
        "finalize": finalize,
        "answer": t_recv - answered_from,
    }


async def _snapshot(stack: stack_mod.Stack) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The actor's latest snapshot (uri, manifest) and its template spec, from Postgres."""
    async with measurements(stack.dsn) as db:
        return await db.latest_snapshot(ATESPACE, ACTOR)


@dataclass
class Floor:
    """What a raw runsc sandbox of an actor's image needs, with no control plane at all: a network
    namespace of its own (``atelet.netns``), an OCI bundle (``atelet.bundle``) of the unpacked
    image (``atelet.images``) with the volumes of a snapshot, and a runsc state root of its own
    (the flags of ``atelet.runsc``)."""

    work: Path
    net: WorkerNet
    runsc: Runsc
    bundle: Path
    port: int

    async def close(self) -> None:
        """Deletes every sandbox under the root, the namespace and the work dir."""
        from atelet import netns

        for cid in await self.runsc.list():
            await self.runsc.delete(cid)
        await netns.destroy(self.net)
        shutil.rmtree(self.work, ignore_errors=True)


async def prepare_floor(
    stack: stack_mod.Stack,
    wspec: pb.WorkloadSpec,
    snapshot_dir: Path,
    *,
    node: str = "atebench-floor",
    subnet: str = "10.96.0.0/30",
    hostname: str = ACTOR,
) -> Floor:
    """Namespace, bundle and runsc root for raw ``runsc restore`` of ``snapshot_dir/checkpoint`` (or
    ``runsc run``): the bundle of ``wspec``'s first container, its durable dirs filled from the
    snapshot's volume tars; ``node`` and ``subnet`` name the namespace and its /30."""
    from atelet import netns
    from atelet.bundle import build_config, write_bundle
    from atelet.images import ImageStore
    from atelet.runsc import Runsc
    from atelet.snapshots import VOLUMES_DIR, extract_dir

    container = wspec.containers[0]
    work = Path(tempfile.mkdtemp(prefix="ate-bench-floor-"))
    net = netns.plan(node, "floor-0", 0, subnet)
    runsc = Runsc("runsc", work / "runsc")
    await netns.create(net)
    image = await ImageStore([ROOT], stack.data_dir / "atelet" / "images").unpack(container.image)
    volumes = {}
    for v in wspec.volumes:
        volumes[v.name] = work / "volumes" / v.name
        volumes[v.name].mkdir(parents=True)
        tar = snapshot_dir / VOLUMES_DIR / f"{v.name}.tar"
        if tar.exists():
            extract_dir(tar, volumes[v.name])
    config = build_config(
        image, container, net.netns_path, volumes, wspec.cpu_millis, wspec.memory_bytes, hostname=hostname
    )
    bundle = write_bundle(work / "bundle", config)
    return Floor(work=work, net=net, runsc=runsc, bundle=bundle, port=container.wakeup_probe.port)


DIRECT_ATELET = "127.0.0.1:18186"
DIRECT_NODE = "atebench-direct"


def _direct_atelet(stack: stack_mod.Stack) -> tuple[subprocess.Popen[bytes], Path]:
    """The atelet of the atelet-direct baseline: one worker `default-0`, the stack's snapshot and
    image roots, its own node, subnet and state dir, and no API server; its certificate from the
    stack's local CA (`ate dev`'s `<data dir>/tls`). Returns the process and its temporary dir
    (the caller removes it)."""
    import sys

    from ate.dev.certificates import ensure_local_certificates

    tls = ensure_local_certificates(stack.data_dir / "tls", [DIRECT_NODE]).node(DIRECT_NODE)
    state = Path(tempfile.mkdtemp(prefix="ate-bench-direct-"))
    log = open(state / "atelet.log", "wb")
    process = subprocess.Popen(
        [
            sys.executable, "-m", "atelet", "--node", DIRECT_NODE, "--listen", DIRECT_ATELET,
            "--tls-cert", str(tls.cert), "--tls-key", str(tls.key), "--tls-ca", str(tls.ca),
            "--state-dir", str(state / "state"), "--snapshot-root", str(stack.data_dir / "snapshots"),
            "--image-root", str(ROOT), "--workers", "1", "--subnet", "10.98.0.0/24", "--metrics-listen", "",
        ],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    log.close()
    deadline = time.monotonic() + 60
    while b"atelet: ready on" not in (state / "atelet.log").read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the baseline's atelet did not start: {(state / 'atelet.log').read_text()[-2000:]}")
        time.sleep(0.05)
    return process, state


class Baselines:
    """atelet-direct and runsc-floor, one of each per cycle, interleaved with ours (same machine state)."""

    def __init__(self, stack: stack_mod.Stack) -> None:
        self.stack = stack
        self.atelet: dict[str, list[float]] = {"total": [], "rpc": [], "first_get": []}
        self.floor: dict[str, list[float]] = {
            "total": [], "restore": [], "first_get": [], "netns_ensure": [], "checkpoint": [],
        }  # fmt: skip
        self.floor_checkpoint: Path | None = None

    async def prepare(self) -> None:
        from activities.atelet_tls import AteletClientTls
        from activities.atelet_wire import workload_spec
        from ate.dev.certificates import LocalCertificates
        from atelet.proto import atelet_pb2_grpc as pb_grpc
        from atelet.snapshots import SnapshotStore
        from domain.templates import ActorTemplateSpec

        self.uri, self.manifest, spec = await _snapshot(self.stack)
        self.wspec = workload_spec(ActorTemplateSpec.from_document(spec))
        self.container = self.wspec.containers[0]
        self.direct, self.direct_dir = _direct_atelet(self.stack)
        control_plane = LocalCertificates(self.stack.data_dir / "tls").control_plane
        tls = AteletClientTls(control_plane.cert, control_plane.key, control_plane.ca)
        self.channel = tls.channel(DIRECT_ATELET, DIRECT_NODE)
        self.stub = pb_grpc.AteletStub(self.channel)  # type: ignore[no-untyped-call]
        self.dest = SnapshotStore([self.stack.data_dir / "snapshots"]).resolve(self.uri)
        self.raw = await prepare_floor(self.stack, self.wspec, self.dest)
        self.work, self.net, self.runsc, self.bundle = self.raw.work, self.raw.net, self.raw.runsc, self.raw.bundle
        from atelet.snapshots import CHECKPOINT_DIR

        # The floor's chain starts from the actor's own snapshot, checkpointed again with runsc's defaults.
        self.floor_checkpoint = await self._floor_cycle("floor-start", self.dest / CHECKPOINT_DIR, timed=False)

    async def _floor_cycle(self, cid: str, checkpoint: Path, *, timed: bool = True) -> Path:
        """Raw runsc: restore ``checkpoint``, first GET, then a default ``runsc checkpoint`` into a
        new directory (returned; the previous one of the chain is removed)."""
        from atelet import netns, probe

        port = self.container.wakeup_probe.port
        t = time.monotonic()
        await netns.ensure(self.net)  # runsc strips the veth's address at every run: part of "prepared"
        t0 = time.monotonic()
        await self.runsc.restore(cid, self.bundle, checkpoint, self.work / "floor.log")
        t1 = time.monotonic()
        while await probe.http_status(self.net.worker_ip, port, "/") != 200:
            await asyncio.sleep(0.002)
        t2 = time.monotonic()
        following = self.work / f"checkpoint-{cid}"
        from atelet.errors import AteletError

        for attempt in range(10):  # a socket still connected inside the sandbox blocks a checkpoint: again
            await asyncio.sleep(0.05)  # for the probe's connection to close
            t3 = time.monotonic()
            try:
                await self.runsc.checkpoint(cid, following)
                break
            except AteletError:
                if attempt == 9:
                    raise
        t4 = time.monotonic()
        await self.runsc.delete(cid)
        if timed:
            self.floor["netns_ensure"].append(t0 - t)
            self.floor["restore"].append(t1 - t0)
            self.floor["first_get"].append(t2 - t1)
            self.floor["total"].append(t2 - t0)
            self.floor["checkpoint"].append(t4 - t3)
        if checkpoint.is_relative_to(self.work):
            shutil.rmtree(checkpoint, ignore_errors=True)
        return following

    async def once(self, i: int) -> None:
        """One atelet-direct cycle on the actor's current latest snapshot, one floor cycle on the
        floor's own chain of default-flag checkpoints."""
        from google.protobuf.json_format import ParseDict

        from atelet import probe
        from atelet.proto import atelet_pb2 as pb

        uri, manifest, _spec = await _snapshot(self.stack)
        dest = self.stack.data_dir / "snapshots"
        from atelet.snapshots import SnapshotStore

        dest = SnapshotStore([dest]).resolve(uri)
        port = self.container.wakeup_probe.port
        ref = pb.ActorRef(atespace=ATESPACE, name=ACTOR)
        op = f"bench-{time.time_ns()}"
        t0 = time.monotonic()
        reply = await self.stub.Restore(
            pb.RestoreRequest(
                operation_id=op + "/restore",
                worker="default-0",
                actor=ref,
                spec=self.wspec,
                snapshot_uri=uri,
                manifest=ParseDict(manifest, pb.SnapshotManifest(), ignore_unknown_fields=True),
                probe_timeout_seconds=30,
            ),
            timeout=120,
        )
        t1 = time.monotonic()
        while await probe.http_status(reply.worker_ip, port, "/") != 200:
            await asyncio.sleep(0.002)
        t2 = time.monotonic()
        self.atelet["rpc"].append(t1 - t0)
        self.atelet["first_get"].append(t2 - t1)
        self.atelet["total"].append(t2 - t0)
        await self.stub.Terminate(
            pb.TerminateRequest(operation_id=op + "/terminate", worker="default-0", actor=ref), timeout=60
        )
        await asyncio.sleep(0.2)
        assert self.floor_checkpoint is not None
        self.floor_checkpoint = await self._floor_cycle(f"floor-{i}", self.floor_checkpoint)
        await asyncio.sleep(0.2)

    async def close(self) -> None:
        await self.channel.close(grace=None)
        self.direct.terminate()
        self.direct.wait(60)
        shutil.rmtree(self.direct_dir, ignore_errors=True)
        await self.raw.close()


async def _interleaved(
    stack: stack_mod.Stack, cycles: int, warmup: int, log: Log
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    base = Baselines(stack)
    await base.prepare()
    try:
        data = await ours(stack, cycles, warmup, log, between=base.once)
    finally:
        await base.close()
    return data, base.atelet, base.floor


def _compression_written(snapshots: Path) -> str:
    """The compression runsc recorded in the newest checkpoint under ``snapshots`` (the metadata
    JSON after the state file's magic ``gVisorSF``), or ``unknown``."""
    states = sorted(snapshots.rglob("checkpoint/checkpoint.img"), key=lambda p: p.stat().st_mtime)
    if not states:
        return "unknown"
    head = states[-1].read_bytes()[:4096]
    try:
        metadata, _ = json.JSONDecoder().raw_decode(head[head.index(b"{") :].decode("utf-8", "replace"))
        return str(metadata.get("compression", "unknown"))
    except ValueError:
        return "unknown"


def _template(ballast_mb: int, directory: Path) -> Path:
    """The counter's template, holding ``ballast_mb`` MiB of memory (its ``BALLAST_MB``) and its
    memory limit raised by as much."""
    import yaml

    if ballast_mb == 0:
        return COUNTER
    document = yaml.safe_load(COUNTER.read_text())
    spec = document["spec"]
    spec["containers"][0]["env"]["BALLAST_MB"] = str(ballast_mb)
    spec["resources"]["limits"]["memory"] = f"{256 + ballast_mb}Mi"
    path = directory / "template.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def run(
    cycles: int = 50,
    warmup: int = 3,
    keep: bool = False,
    log: Log = print,
    ballast_mb: int = 0,
    microvm_cycles: int = 10,
) -> dict[str, Any]:
    """Run the benchmark (module doc); ``ballast_mb``: MiB of memory the counter holds;
    ``microvm_cycles``: cycles of the microvm row (bench/activation_microvm.py; 0: none)."""
    from bench import activation_microvm

    extra = ("--microvm-workers", "1") if microvm_cycles else ()
    stack = stack_mod.start(workers=1, keep=keep, log=log, extra=extra)
    vm: dict[str, Any] | None = None
    try:
        template = _template(ballast_mb, stack.data_dir)
        setup(stack.api_url, stack.token, ATESPACE, [ACTOR], template)
        # one suspend/resume first so that the actor has a snapshot of its own (not the golden one)
        asyncio.run(ours(stack, 1, 0, log))
        ours_data, atelet_data, floor_data = asyncio.run(_interleaved(stack, cycles, warmup, log))
        from bench.common import rss_bytes

        sandbox_pids = stack.processes()["runsc"]  # the actor is RUNNING now: its sandbox + gofer
        sandbox_rss = sum(rss_bytes(p) for p in sandbox_pids)
        snap_bytes = sum(f.stat().st_size for f in (stack.data_dir / "snapshots").rglob("*") if f.is_file())
        n_snaps = len(list((stack.data_dir / "snapshots").rglob("manifest.json")))
        compression = _compression_written(stack.data_dir / "snapshots")
        if microvm_cycles:
            vm = asyncio.run(activation_microvm.run_row(stack, microvm_cycles, min(warmup, 2), log))
    finally:
        stack.stop()
    rows = ours_data["rows"]
    total = [r["total"] for r in rows]
    s_ours, s_atelet, s_floor = summary(total), summary(atelet_data["total"]), summary(floor_data["total"])
    out: list[str] = []
    out.append(
        f"activation latency, {len(rows)} cycles (ms); counter with {ballast_mb} MiB ballast; "
        f"the actor's checkpoints written with compression {compression} (runsc's record)"
    )
    hdr = ["path", "p50", "p95", "p99", "mean", "max"]
    rws = [
        [n, *(ms(s[k]) for k in ("p50", "p95", "p99", "mean", "max"))]
        for n, s in (
            ("ours: router GET of a suspended actor", s_ours),
            ("atelet gRPC Restore + first GET", s_atelet),
            ("floor: runsc restore + first GET", s_floor),
        )
    ]
    rws.append(["overhead ours - floor", *(ms(s_ours[k] - s_floor[k]) for k in ("p50", "p95", "p99", "mean", "max"))])
    rws.append(["overhead ours - atelet", *(ms(s_ours[k] - s_atelet[k]) for k in ("p50", "p95", "p99", "mean", "max"))])
    out.append(table(hdr, rws))
    out.append("")
    out.append("where the time of 'ours' goes (ms; per-step percentiles do not add up to the total's)")
    step_rows = []
    for step in STEPS:
        s = summary([r[step] for r in rows])
        step_rows.append([step, ms(s["p50"]), ms(s["p95"]), ms(s["mean"]), STEP_DOC[step]])
    out.append(table(["step", "p50", "p95", "mean", "what"], step_rows))
    early = sum(1 for r in rows if r["before_completion"])
    out.append(f"answered before the workflow's completion (at the commit's NOTIFY): {early} of {len(rows)} cycles")
    out.append("")
    fl = {k: summary(v) for k, v in floor_data.items()}
    out.append("floor detail (ms): " + ", ".join(f"{k} p50 {ms(v['p50']):.1f}" for k, v in fl.items()))
    s_suspend, s_checkpoint = summary(ours_data["suspend_s"][warmup:]), fl["checkpoint"]
    out.append(
        f"suspend via API (ms): p50 {ms(s_suspend['p50']):.1f} p95 {ms(s_suspend['p95']):.1f}; floor: runsc "
        f"checkpoint (default flags) p50 {ms(s_checkpoint['p50']):.1f} p95 {ms(s_checkpoint['p95']):.1f}; "
        f"overhead {ms(s_suspend['p50'] - s_checkpoint['p50']):.1f}/{ms(s_suspend['p95'] - s_checkpoint['p95']):.1f}"
    )
    if vm is not None:
        out.append("")
        out.append(f"microvm row ({vm['accelerator']}: QEMU {'with KVM' if vm['accelerator'] == 'kvm' else 'software emulation, no KVM'}), "
                   f"{len(vm['raw']['ours'])} cycles (ms)")  # fmt: skip
        out.append(table(hdr, [
            [n, *(ms(v[k]) for k in ("p50", "p95", "p99", "mean", "max"))]
            for n, v in (("ours: router GET of a suspended microvm actor", vm["ours"]),
                         ("floor: raw QEMU restore + first GET", vm["floor"]))
        ] + [["overhead ours - floor", *(ms(vm["ours"][k] - vm["floor"][k]) for k in ("p50", "p95", "p99", "mean", "max"))]]))  # fmt: skip
        detail = vm["floor_detail"]
        out.append(f"floor detail (ms): restore p50 {ms(detail['restore']['p50']):.1f}, first GET p50 "
                   f"{ms(detail['first_get']['p50']):.1f}; suspend via API p50 {ms(vm['suspend']['p50']):.1f} "
                   f"p95 {ms(vm['suspend']['p95']):.1f}")  # fmt: skip
        out.append("ours, where it goes (ms p50): " + ", ".join(f"{k} {ms(v['p50']):.1f}" for k, v in vm["steps"].items()
                                                              if k in STEPS))  # fmt: skip
    out.append(
        f"snapshots on disk {n_snaps}, "
        f"{snap_bytes / n_snaps / 1e6 if n_snaps else 0:.2f} MB each; RSS of one RUNNING counter sandbox "
        f"{sandbox_rss / 2**20:.1f} MiB ({len(sandbox_pids)} runsc processes)"
    )
    key = (
        f"KEY activation p50/p95/p99 ms: ours {ms(s_ours['p50']):.0f}/{ms(s_ours['p95']):.0f}/{ms(s_ours['p99']):.0f}"
        f" atelet {ms(s_atelet['p50']):.0f}/{ms(s_atelet['p95']):.0f}/{ms(s_atelet['p99']):.0f}"
        f" floor {ms(s_floor['p50']):.0f}/{ms(s_floor['p95']):.0f}/{ms(s_floor['p99']):.0f}"
        f" overhead {ms(s_ours['p50'] - s_floor['p50']):.0f}/{ms(s_ours['p95'] - s_floor['p95']):.0f}"
        f"/{ms(s_ours['p99'] - s_floor['p99']):.0f}"
    )
    if vm is not None:
        o, f = vm["ours"], vm["floor"]
        key += (
            f" microvm({vm['accelerator']}) ours {ms(o['p50']):.0f}/{ms(o['p95']):.0f}/{ms(o['p99']):.0f}"
            f" floor {ms(f['p50']):.0f}/{ms(f['p95']):.0f}/{ms(f['p99']):.0f}"
            f" overhead {ms(o['p50'] - f['p50']):.0f}/{ms(o['p95'] - f['p95']):.0f}/{ms(o['p99'] - f['p99']):.0f}"
        )
    out.append(key)
    text = "\n".join(out)
    result = {
        "benchmark": "activation",
        "machine": machine(),
        "cycles": len(rows),
        "ballast_mb": ballast_mb,
        "checkpoint_compression": compression,
        "ours": s_ours,
        "atelet": s_atelet,
        "floor": s_floor,
        "steps": {k: summary([r[k] for r in rows]) for k in STEPS},
        "floor_detail": fl,
        "atelet_detail": {k: summary(v) for k, v in atelet_data.items()},
        "suspend": s_suspend,
        "suspend_floor": s_checkpoint,
        "sandbox_rss_bytes": sandbox_rss,
        "snapshot_bytes_each": snap_bytes / n_snaps if n_snaps else 0,
        "raw": {"ours": rows, "atelet": atelet_data, "floor": floor_data},
        "microvm": vm,
        "text": text,
    }
    path = write_result("activation", result)
    print(text.replace("\nKEY", f"\nresults: {path}\nKEY"))
    return result
