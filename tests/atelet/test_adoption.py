"""An atelet restart does not kill workloads: sandboxes that survived a SIGKILL of the atelet are
adopted by the next atelet on the same state dir (real runsc, ``python -m atelet`` processes)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx
import pytest

from atelet.proto import atelet_pb2 as pb
from atelet.proto import atelet_pb2_grpc as pb_grpc
from atelet.settings import AteletSettings
from tests.atelet.conftest import (
    REPO,
    assert_nothing_left,
    control_plane_tls,
    counter_spec,
    cpu_limit_of_pid,
    force_cleanup,
    lift_cpu_limit_of_pid,
    make_settings,
    runsc_missing,
    tls_flags,
)
from tests.atelet.fake_api import FakeApi, fake_api

pytestmark = [pytest.mark.runsc, pytest.mark.asyncio]

P1 = pb.ActorRef(atespace="demo", name="p1")


@dataclass
class Agent:
    """Starts ``python -m atelet`` processes on one state dir, one after the other."""

    settings: AteletSettings
    base: Path
    env: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def args(self) -> list[str]:
        s = self.settings
        return ["--node", s.node, "--listen", s.listen, "--state-dir", str(s.state_dir),
                "--snapshot-root", str(s.snapshot_roots[0]), "--image-root", str(REPO), "--workers", "2",
                "--subnet", s.subnet, "--metrics-listen", "", "--api-server", str(s.api_server),
                "--heartbeat-seconds", "0.2", *tls_flags(s.node)]

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        return self.procs[-1]

    @property
    def log_path(self) -> Path:
        return self.base / f"atelet-{len(self.procs)}.log"

    def start(self) -> float:
        """Starts an atelet and waits for its ready line; returns the seconds that took."""
        started = time.monotonic()
        log_path = self.base / f"atelet-{len(self.procs) + 1}.log"
        with log_path.open("wb") as out:
            self.procs.append(subprocess.Popen([sys.executable, "-m", "atelet", *self.args], cwd=REPO,
                                               stdout=out, stderr=subprocess.STDOUT, env=self.env))
        while "atelet: ready on" not in log_path.read_text():
            assert self.proc.poll() is None, f"atelet exited {self.proc.returncode}:\n{log_path.read_text()}"
            assert time.monotonic() - started < 60, log_path.read_text()
            time.sleep(0.02)
        return time.monotonic() - started

    def sigkill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def sigterm(self) -> int:
        """SIGTERM the current atelet and wait for its exit status (its log in the failure when
        it does not stop within 60 s: CI run 20 once saw that, with nothing to tell why)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            log = self.log_path.read_text(errors="replace")[-20000:]
            raise AssertionError(f"atelet did not stop within 60 s of SIGTERM; the end of its log:\n{log}") from None

    def stub(self) -> tuple[grpc.aio.Channel, pb_grpc.AteletStub]:
        channel = control_plane_tls().channel(self.settings.listen, self.settings.node)
        return channel, pb_grpc.AteletStub(channel)

    def runsc(self, *args: str) -> subprocess.CompletedProcess[str]:
        root = Path(self.settings.state_dir).resolve() / "runsc"
        return subprocess.run(["runsc", f"--root={root}", *args], capture_output=True, text=True, check=False)

    def containers(self) -> list[str]:
        return self.runsc("list", "-quiet").stdout.split()

    def sandbox_pid(self, worker: str) -> int:
        ids = [c for c in self.containers() if c.startswith(f"{worker}-")]
        assert len(ids) == 1, ids
        return int(json.loads(self.runsc("state", ids[0]).stdout)["pid"])

    def netns_inode(self, worker: str) -> int:
        return os.stat(f"/var/run/netns/ate-{self.settings.node}-{worker}").st_ino

    def record(self, worker: str) -> Path:
        return Path(self.settings.state_dir).resolve() / "workers" / worker / "assignment.json"


@pytest.fixture
def api() -> Iterator[FakeApi]:
    with fake_api() as api:
        yield api


@pytest.fixture
def agent(short_tmp: Path, api: FakeApi) -> Iterator[Agent]:
    reason = runsc_missing()
    if reason:
        pytest.skip(reason)
    settings = make_settings(short_tmp, api_server=api.url)
    env = dict(os.environ, ATE_FAILPOINTS_DIR=str(short_tmp / "failpoints"))
    (short_tmp / "failpoints").mkdir()
    a = Agent(settings, short_tmp, env)
    try:
        yield a
    finally:
        for p in a.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
        force_cleanup(settings)


async def get_count(ip: str) -> int:
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.get(f"http://{ip}:8080/", headers={"Connection": "close"})
        return int(response.json()["memory_count"])


async def health(stub: pb_grpc.AteletStub) -> dict[str, tuple[str, str]]:
    response = await stub.Health(pb.HealthRequest())
    return {w.name: (w.sandbox_state, f"{w.actor.atespace}/{w.actor.name}" if w.actor.name else "") for w in response.workers}


def beat_after(api: FakeApi, since: float, timeout: float = 5.0) -> dict[str, object]:
    """The workers' ``actor`` of the first heartbeat sent after ``since``."""
    assert api.wait_for(lambda: any(r.at > since for r in api.of("PUT", "")), timeout)
    beat = next(r for r in api.of("PUT", "") if r.at > since)
    return {w["name"]: w["actor"] for w in beat.body["workers"]}


async def test_sigkilled_atelet_adopts_its_running_sandbox(agent: Agent, api: FakeApi, counter_image: str) -> None:
    first_start = agent.start()
    channel, stub = agent.stub()
    async with channel:
        run = await stub.Run(pb.RunRequest(operation_id="ad-run-1", worker="default-0", actor=P1,
                                           spec=counter_spec(counter_image), probe_timeout_seconds=20))
        assert [await get_count(run.worker_ip) for _ in range(2)] == [1, 2]
    pid, inode = agent.sandbox_pid("default-0"), agent.netns_inode("default-0")
    record = json.loads(agent.record("default-0").read_text())
    assert record["actor"] == {"atespace": "demo", "name": "p1"} and record["operation"]["id"] == "ad-run-1"
    assert record["probe"] == {"ip": run.worker_ip, "port": 8080, "path": "/readyz"}

    assert cpu_limit_of_pid(pid) == (50_000, 100_000)  # the template's 500m

    agent.sigkill()
    # While the atelet is down the host end of the worker's veth loses its address (as when the
    # host's network is reconfigured): adoption puts it back without touching the namespace.
    net = record["net"]
    subprocess.run(["ip", "addr", "flush", "dev", net["host_if"]], check=True)
    # And the sandbox has no CPU limit, as when the atelet was killed after runsc started it and
    # before it wrote the limit: adoption writes it.
    lift_cpu_limit_of_pid(pid)
    assert cpu_limit_of_pid(pid)[0] == -1
    killed = time.monotonic()
    restart = agent.start()
    channel, stub = agent.stub()
    async with channel:
        assert (await health(stub))["default-0"] == ("running", "demo/p1")
        assert beat_after(api, killed)["default-0"] == {"atespace": "demo", "name": "p1"}
        # The same sandbox in the same namespace: never recreated, and it kept its memory.
        assert agent.sandbox_pid("default-0") == pid and agent.netns_inode("default-0") == inode
        assert cpu_limit_of_pid(pid) == (50_000, 100_000)
        first_get = time.monotonic()
        assert await get_count(run.worker_ip) == 3
        get_s = time.monotonic() - first_get
        assert "adopted sandbox" in agent.log_path.read_text()

        uri = f"file://{Path(agent.settings.snapshot_roots[0]).resolve()}/demo/p1/1"
        ckpt = await stub.Checkpoint(pb.CheckpointRequest(operation_id="ad-ckpt-1", worker="default-0", actor=P1,
                                                          scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri))
        assert ckpt.manifest.created_by_operation == "ad-ckpt-1"
        assert (await health(stub))["default-0"] == ("idle", "")
        assert not agent.record("default-0").exists()
        restored = await stub.Restore(pb.RestoreRequest(
            operation_id="ad-restore-1", worker="default-1", actor=P1, spec=counter_spec(counter_image),
            snapshot_uri=uri, manifest=ckpt.manifest, probe_timeout_seconds=20))
        assert await get_count(restored.worker_ip) == 4
        await stub.Terminate(pb.TerminateRequest(operation_id="ad-term-1", worker="default-1", actor=P1))
    assert agent.sigterm() == 0
    assert_nothing_left(agent.settings)
    print(f"adoption: first start {first_start:.2f}s, restart with 1 adopted sandbox {restart:.2f}s, "
          f"first GET after restart {get_s * 1000:.1f}ms")


async def test_sandboxes_gone_while_the_atelet_was_down_free_their_workers(
        agent: Agent, api: FakeApi, counter_image: str) -> None:
    agent.start()
    channel, stub = agent.stub()
    async with channel:
        for i, name in enumerate(("g0", "g1")):
            run = await stub.Run(pb.RunRequest(operation_id=f"gone-run-{i}", worker=f"default-{i}",
                                               actor=pb.ActorRef(atespace="demo", name=name),
                                               spec=counter_spec(counter_image), probe_timeout_seconds=20))
            assert await get_count(run.worker_ip) == 1
    agent.sigkill()
    # default-0: the sandbox process is killed (gone); default-1: the workload is killed (stopped).
    pid = agent.sandbox_pid("default-0")
    os.kill(pid, signal.SIGKILL)
    stopped = next(c for c in agent.containers() if c.startswith("default-1-"))
    assert agent.runsc("kill", stopped, "KILL").returncode == 0
    for _ in range(100):
        if json.loads(agent.runsc("state", stopped).stdout or "{}").get("status") == "stopped":
            break
        time.sleep(0.05)
    killed = time.monotonic()
    agent.start()
    channel, stub = agent.stub()
    async with channel:
        assert await health(stub) == {"default-0": ("idle", ""), "default-1": ("idle", "")}
        assert beat_after(api, killed) == {"default-0": None, "default-1": None}
        assert agent.containers() == []
        assert not agent.record("default-0").exists() and not agent.record("default-1").exists()
        assert (Path(agent.settings.state_dir).resolve() / "actors/demo/g1/volumes/data").is_dir()  # kept
        # The workers are usable again (their namespaces were rebuilt).
        run = await stub.Run(pb.RunRequest(operation_id="gone-run-2", worker="default-0",
                                           actor=pb.ActorRef(atespace="demo", name="g0"),
                                           spec=counter_spec(counter_image), probe_timeout_seconds=20))
        assert await get_count(run.worker_ip) == 1
    assert agent.sigterm() == 0
    assert_nothing_left(agent.settings)
    assert api.events() == []  # not reported as exits: the control plane reconciles idle workers


async def test_restore_retried_after_a_crash_before_its_response_is_not_done_twice(
        agent: Agent, api: FakeApi, counter_image: str) -> None:
    failpoints = agent.base / "failpoints"
    agent.start()
    channel, stub = agent.stub()
    async with channel:
        run = await stub.Run(pb.RunRequest(operation_id="rt-run-1", worker="default-0", actor=P1,
                                           spec=counter_spec(counter_image), probe_timeout_seconds=20))
        assert await get_count(run.worker_ip) == 1
        uri = f"file://{Path(agent.settings.snapshot_roots[0]).resolve()}/demo/p1/1"
        ckpt = await stub.Checkpoint(pb.CheckpointRequest(operation_id="rt-ckpt-1", worker="default-0", actor=P1,
                                                          scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri))
        request = pb.RestoreRequest(operation_id="rt-restore-1", worker="default-1", actor=P1,
                                    spec=counter_spec(counter_image), snapshot_uri=uri, manifest=ckpt.manifest,
                                    probe_timeout_seconds=20)
        (failpoints / "Atelet.restore.after_boot").write_text("armed")
        first = asyncio.ensure_future(stub.Restore(request))
        for _ in range(600):
            if (failpoints / "Atelet.restore.after_boot.reached").exists():
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the restore never reached its failpoint")
        worker_ip = (await health_ips(stub))["default-1"]
        assert await get_count(worker_ip) == 2  # restored (snapshot at 1) and serving; no response yet
        agent.sigkill()  # after the restore finished, before its response was recorded or sent
        with pytest.raises(grpc.aio.AioRpcError):
            await first
    (failpoints / "Atelet.restore.after_boot").unlink()
    agent.start()
    channel, stub = agent.stub()
    async with channel:
        retried = await stub.Restore(request)
        assert retried.worker_ip == worker_ip
        assert await get_count(worker_ip) == 3  # the same sandbox: a second restore would answer 2
        assert (await stub.Restore(request)).worker_ip == worker_ip  # now recorded
        assert (await health(stub))["default-1"] == ("running", "demo/p1")
        assert "already runs on default-1 (started by this operation, adopted" in agent.log_path.read_text()
        # A Restore of the same actor with another operation ID is refused: the worker is busy.
        other = pb.RestoreRequest()
        other.CopyFrom(request)
        other.operation_id = "rt-restore-2"
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Restore(other)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        await stub.Terminate(pb.TerminateRequest(operation_id="rt-term-1", worker="default-1", actor=P1))
    assert agent.sigterm() == 0
    assert_nothing_left(agent.settings)


async def test_retried_run_of_an_adopted_sandbox_that_does_not_answer_is_unavailable(
        agent: Agent, api: FakeApi, counter_image: str) -> None:
    failpoints = agent.base / "failpoints"
    agent.start()
    channel, stub = agent.stub()
    request = pb.RunRequest(operation_id="un-run-1", worker="default-0", actor=P1,
                            spec=counter_spec(counter_image), probe_timeout_seconds=1)
    async with channel:
        (failpoints / "Atelet.run.after_boot").write_text("armed")
        first = asyncio.ensure_future(stub.Run(request))
        for _ in range(600):
            if (failpoints / "Atelet.run.after_boot.reached").exists():
                break
            await asyncio.sleep(0.05)
        agent.sigkill()
        with pytest.raises(grpc.aio.AioRpcError):
            await first
    (failpoints / "Atelet.run.after_boot").unlink()
    host_if = json.loads(agent.record("default-0").read_text())["net"]["host_if"]
    host_ip = json.loads(agent.record("default-0").read_text())["net"]["host_ip"]
    agent.start()
    channel, stub = agent.stub()
    async with channel:
        assert (await health(stub))["default-0"] == ("running", "demo/p1")
        # The sandbox runs but cannot be reached (the host end lost its address): not a success.
        subprocess.run(["ip", "addr", "flush", "dev", host_if], check=True)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Run(request)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE, err.value.details()
        subprocess.run(["ip", "addr", "replace", f"{host_ip}/30", "dev", host_if], check=True)
        assert (await stub.Run(request)).worker_ip  # reachable again: the retry succeeds
        await stub.Terminate(pb.TerminateRequest(operation_id="un-term-1", worker="default-0", actor=P1))
    assert agent.sigterm() == 0
    assert_nothing_left(agent.settings)


async def health_ips(stub: pb_grpc.AteletStub) -> dict[str, str]:
    return {w.name: w.ip for w in (await stub.Health(pb.HealthRequest())).workers}


# ---- a checkpoint in progress when the atelet is killed ------------------------------------
# The chaos run of 2026-12-02 killed the atelet (SIGKILL) while it checkpointed a large actor: the
# sandbox finished its save by itself and exited, the restarted atelet removed the unfinished
# staging directory and freed the worker, and the actor's memory was lost (5 times of 5). The save
# must be completed by the Checkpoint call's retry, and the restored actor count on from where it was.

BIG = pb.ActorRef(atespace="demo", name="big")
BALLAST_MB = 400  # memory the counter fills at start: its save takes about a second here


def big_spec(image: str) -> pb.WorkloadSpec:
    spec = counter_spec(image)
    spec.containers[0].env["BALLAST_MB"] = str(BALLAST_MB)
    spec.memory_bytes = 1024 * 2**20
    return spec


def saved_bytes(agent: Agent) -> int:
    """Bytes written so far into the staging dirs of the big actor's snapshots."""
    root = Path(agent.settings.snapshot_roots[0]).resolve() / "demo" / "big"
    return sum(f.stat().st_size for f in root.glob(".*/**/*") if f.is_file())


async def saving(agent: Agent, sandbox_pid: int, timeout: float = 60) -> None:
    """Returns once half of the sandbox's memory is saved and the sandbox has not yet exited: the
    moment the chaos run's kills hit (the sandbox then finishes its save alone)."""
    deadline = time.monotonic() + timeout
    while saved_bytes(agent) < BALLAST_MB * 2**20 // 2:
        assert time.monotonic() < deadline, "the checkpoint never started"
        await asyncio.sleep(0.005)
    assert Path(f"/proc/{sandbox_pid}").exists(), "the save ended before the test could interrupt it"


async def run_big(agent: Agent, image: str) -> None:
    """Runs the big actor on default-0 and counts to 2."""
    channel, stub = agent.stub()
    async with channel:
        run = await stub.Run(pb.RunRequest(operation_id="big-run", worker="default-0", actor=BIG,
                                           spec=big_spec(image), probe_timeout_seconds=60))
    assert [await get_count(run.worker_ip) for _ in range(2)] == [1, 2]


async def started_big(agent: Agent, image: str) -> tuple[pb.CheckpointRequest, int]:
    """Starts the atelet with the big actor on default-0 (counted to 2); returns the Checkpoint
    request of its first snapshot and the pid of its sandbox."""
    agent.start()
    await run_big(agent, image)
    uri = f"file://{Path(agent.settings.snapshot_roots[0]).resolve()}/demo/big/1"
    request = pb.CheckpointRequest(operation_id="big-ckpt", worker="default-0", actor=BIG,
                                   scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri)
    return request, agent.sandbox_pid("default-0")


async def restore_counts_on(agent: Agent, image: str, uri: str, manifest: pb.SnapshotManifest) -> None:
    """The snapshot restores on default-1 with the memory it had (the count goes on at 3)."""
    channel, stub = agent.stub()
    async with channel:
        restored = await stub.Restore(pb.RestoreRequest(
            operation_id="big-restore", worker="default-1", actor=BIG, spec=big_spec(image),
            snapshot_uri=uri, manifest=manifest, probe_timeout_seconds=60))
        assert await get_count(restored.worker_ip) == 3
        await stub.Terminate(pb.TerminateRequest(operation_id="big-term", worker="default-1", actor=BIG))


async def test_a_save_interrupted_by_an_atelet_kill_is_completed_by_the_retry(
        agent: Agent, api: FakeApi, counter_image: str) -> None:
    request, pid = await started_big(agent, counter_image)
    channel, stub = agent.stub()
    async with channel:
        first = asyncio.ensure_future(stub.Checkpoint(request))
        await saving(agent, pid)
        agent.sigkill()
        with pytest.raises(grpc.aio.AioRpcError):
            await first
    agent.start()
    channel, stub = agent.stub()
    async with channel:
        retried = await stub.Checkpoint(request)
        assert retried.manifest.created_by_operation == "big-ckpt"
        assert retried.manifest.scope == pb.SNAPSHOT_SCOPE_FULL
        assert (await health(stub))["default-0"] == ("idle", "")
        assert not agent.record("default-0").exists()
        assert "with its checkpoint big-ckpt in progress" in agent.log_path.read_text()
        assert (await stub.Checkpoint(request)).manifest == retried.manifest  # a repeat answers the same
    await restore_counts_on(agent, counter_image, request.snapshot_uri, retried.manifest)
    assert agent.sigterm() == 0
    assert_nothing_left(agent.settings)


async def test_a_save_whose_call_was_cancelled_is_completed_by_the_retry(
        agent: Agent, api: FakeApi, counter_image: str) -> None:
    request, pid = await started_big(agent, counter_image)
    channel, stub = agent.stub()
    async with channel:
        first = asyncio.ensure_future(stub.Checkpoint(request))
        await saving(agent, pid)
        first.cancel()  # the caller gives up (as a deadline does) while the sandbox saves itself
        with pytest.raises(asyncio.CancelledError):
            await first
        retried = await stub.Checkpoint(request)
        assert retried.manifest.created_by_operation == "big-ckpt"
        assert (await health(stub))["default-0"] == ("idle", "")
    await restore_counts_on(agent, counter_image, request.snapshot_uri, retried.manifest)
    assert agent.sigterm() == 0
    assert_nothing_left(agent.settings)
