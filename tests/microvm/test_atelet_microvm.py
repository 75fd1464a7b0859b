"""The atelet's microvm workers on real QEMU (TCG here, MICROVM.md), through its gRPC API as the
control plane calls it: the example counter runs in a VM, a FULL checkpoint moves its memory and
its durable dir to another worker, a DATA one only the dir, a damaged RAM file is refused before
any VM starts, and a restarted atelet adopts the VM that still runs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import pytest_asyncio

from ate.dev.object_store import LocalObjectStore
from atelet.proto import atelet_pb2 as pb
from atelet.settings import AteletSettings
from tests.atelet.conftest import (
    Atelet,
    counter_spec,
    force_cleanup,
    make_settings,
    running_atelet,
    tls_flags,
)
from tests.atelet.test_adoption import Agent

pytestmark = [pytest.mark.qemu, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]
ACTOR = pb.ActorRef(atespace="demo", name="vm1")
SUSPENDED_SECONDS = 3.0
"""How long a snapshot waits before its restore in the clock check."""
PROBE_SECONDS = 120  # a TCG boot of the Debian kernel and the counter takes seconds; a hang fails instead


def op() -> str:
    return f"op-{uuid.uuid4().hex[:12]}"


def microvm_settings(base: Path, kernel_dir: Path) -> AteletSettings:
    return make_settings(base, workers=0, microvm_workers=2, microvm_kernel_dir=kernel_dir,
                         microvm_accelerator="tcg", microvm_durable_dir_mib=32)  # fmt: skip


@pytest_asyncio.fixture
async def atelet(short_tmp: Path, kernel_dir: Path) -> AsyncIterator[Atelet]:
    settings = microvm_settings(short_tmp, kernel_dir)
    try:
        async with running_atelet(settings) as a:
            yield a
        assert_no_vm_left(settings)
    finally:
        kill_vms(settings)
        force_cleanup(settings)


def qemu_pids(settings: AteletSettings) -> list[int]:
    """The QEMU processes whose files lie under this atelet's state dir."""
    state = str(Path(settings.state_dir).resolve()).encode()
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                cmdline = (proc / "cmdline").read_bytes()
                if b"qemu-system" in cmdline and state in cmdline:
                    found.append(int(proc.name))
    return found


def assert_no_vm_left(settings: AteletSettings) -> None:
    assert qemu_pids(settings) == [], "QEMU processes left"
    microvm = Path(settings.state_dir).resolve() / "microvm"
    assert not microvm.exists() or list(microvm.iterdir()) == [], f"VM dirs left: {list(microvm.iterdir())}"


def kill_vms(settings: AteletSettings) -> None:
    for pid in qemu_pids(settings):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


async def get(ip: str) -> dict:
    async with httpx.AsyncClient(timeout=20, trust_env=False) as client:
        response = await client.get(f"http://{ip}:8080/", headers={"Connection": "close"})
        response.raise_for_status()
        return response.json()


async def run_counter(a: Atelet, worker: str) -> pb.RunResponse:
    return await a.stub.Run(pb.RunRequest(operation_id=op(), worker=worker, actor=ACTOR, spec=counter_spec(),
                                          probe_timeout_seconds=PROBE_SECONDS))  # fmt: skip


async def checkpoint(a: Atelet, worker: str, scope: int, uri: str) -> pb.CheckpointResponse:
    return await a.stub.Checkpoint(pb.CheckpointRequest(operation_id=op(), worker=worker, actor=ACTOR, scope=scope,
                                                        snapshot_uri=uri))  # fmt: skip


def restore_request(worker: str, uri: str, manifest: pb.SnapshotManifest) -> pb.RestoreRequest:
    return pb.RestoreRequest(operation_id=op(), worker=worker, actor=ACTOR, spec=counter_spec(), snapshot_uri=uri,
                             manifest=manifest, probe_timeout_seconds=PROBE_SECONDS)  # fmt: skip


async def test_a_full_checkpoint_moves_the_vms_memory_and_durable_dir_to_another_worker(
    atelet: Atelet, counter_image: str
) -> None:
    run = await run_counter(atelet, "microvm-0")
    assert await get(run.worker_ip) == {"ip": run.worker_ip, "memory_count": 1, "file_count": 1}
    assert (await get(run.worker_ip))["memory_count"] == 2
    uri = f"file://{atelet.snapshot_root}/demo/vm1/1"
    saved = await checkpoint(atelet, "microvm-0", pb.SNAPSHOT_SCOPE_FULL, uri)
    manifest = saved.manifest
    assert manifest.sandbox_class == "microvm"
    # the runtime placement matches a FULL snapshot against (check 4): QEMU, its machine, the accelerator
    assert manifest.runsc_version.startswith("QEMU 7.") and ", machine pc-q35-" in manifest.runsc_version
    assert manifest.runsc_version.endswith(
        ", accelerator tcg, devices serial:chardev-file,virtio-net-pci,virtserialport:ate.agent,virtio-blk-pci"
    )
    files = {f.path for f in manifest.files}
    assert {"checkpoint/ram", "checkpoint/state", "checkpoint/vm.json", "checkpoint/disk0",
            "checkpoint/guest.json", "volumes/data.tar"} <= files, files  # fmt: skip
    ram = next(f for f in manifest.files if f.path == "checkpoint/ram")
    assert ram.size_bytes == 256 * 2**20  # the template's memory limit is the VM's RAM
    health = await atelet.stub.Health(pb.HealthRequest())
    assert [w.sandbox_state for w in health.workers] == ["idle", "idle"]

    await asyncio.sleep(SUSPENDED_SECONDS)  # the guest's clock stands still in the snapshot meanwhile
    restored = await atelet.stub.Restore(restore_request("microvm-1", uri, manifest))
    assert restored.worker_ip != run.worker_ip
    # memory kept (3, not 1), the durable dir too, and the guest answers on the new worker's address
    assert await get(restored.worker_ip) == {"ip": restored.worker_ip, "memory_count": 3, "file_count": 3}
    # its wall clock is the host's again (within 1 s), not SUSPENDED_SECONDS behind
    clock = await atelet.stub.Exec(pb.ExecRequest(operation_id=op(), worker="microvm-1", actor=ACTOR,
                                                  command=["date", "+%s"]))  # fmt: skip
    assert abs(int(clock.stdout) - time.time()) <= 1.5, (clock.stdout, time.time())
    done = await atelet.stub.Terminate(pb.TerminateRequest(operation_id=op(), worker="microvm-1", actor=ACTOR))
    assert done.was_running


async def test_a_data_checkpoint_keeps_the_durable_dir_and_boots_fresh(atelet: Atelet, counter_image: str) -> None:
    run = await run_counter(atelet, "microvm-0")
    await get(run.worker_ip)
    await get(run.worker_ip)
    uri = f"file://{atelet.snapshot_root}/demo/vm1/2"
    saved = await checkpoint(atelet, "microvm-0", pb.SNAPSHOT_SCOPE_DATA, uri)
    assert {f.path for f in saved.manifest.files} == {"volumes/data.tar"}
    restored = await atelet.stub.Restore(restore_request("microvm-0", uri, saved.manifest))
    # a cold boot: memory starts again at 1; the file count read back from the VM's disk goes on
    assert await get(restored.worker_ip) == {"ip": restored.worker_ip, "memory_count": 1, "file_count": 3}
    await atelet.stub.Terminate(pb.TerminateRequest(operation_id=op(), worker="microvm-0", actor=ACTOR))


async def test_a_damaged_ram_file_is_refused_and_the_worker_stays_free(atelet: Atelet, counter_image: str) -> None:
    run = await run_counter(atelet, "microvm-0")
    await get(run.worker_ip)
    uri = f"file://{atelet.snapshot_root}/demo/vm1/3"
    saved = await checkpoint(atelet, "microvm-0", pb.SNAPSHOT_SCOPE_FULL, uri)
    ram = atelet.snapshot_root / "demo/vm1/3/checkpoint/ram"
    with ram.open("r+b") as f:  # one byte of guest memory changed: QEMU itself would not notice
        f.seek(64 * 2**20)
        byte = f.read(1)
        f.seek(64 * 2**20)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await atelet.stub.Restore(restore_request("microvm-1", uri, saved.manifest))
    assert refused.value.code() == grpc.StatusCode.DATA_LOSS, refused.value.details()
    assert "checkpoint/ram" in (refused.value.details() or ""), refused.value.details()
    assert qemu_pids(atelet.settings) == []  # no VM left behind by the refusal
    health = await atelet.stub.Health(pb.HealthRequest())
    assert [w.sandbox_state for w in health.workers] == ["idle", "idle"]


class MicrovmAgent(Agent):
    """``python -m atelet`` processes with two microvm workers on one state dir."""

    kernel_dir: Path = Path()
    extra: tuple[str, ...] = ()

    @property
    def args(self) -> list[str]:
        s = self.settings
        return ["--node", s.node, "--listen", s.listen, "--state-dir", str(s.state_dir),
                "--snapshot-root", str(s.snapshot_roots[0]), "--image-root", str(ROOT), "--workers", "0",
                "--microvm-workers", "2", "--microvm-kernel-dir", str(self.kernel_dir),
                "--microvm-accelerator", "tcg", "--subnet", s.subnet, "--metrics-listen", "",
                *tls_flags(s.node), *self.extra]  # fmt: skip


async def test_a_restarted_atelet_adopts_the_vm_that_still_runs(
    short_tmp: Path, kernel_dir: Path, counter_image: str
) -> None:
    # The atelet is SIGKILLed with a VM running: the VM runs on (QEMU is in its own session) and
    # the next atelet on the same state dir takes it over: same QEMU process, memory going on,
    # and it checkpoints it as if it had started it.
    with microvm_agent(short_tmp, kernel_dir) as (agent, _):
        settings = agent.settings
        run = await run_on(agent, "microvm-1")
        (pid,) = qemu_pids(settings)
        agent.sigkill()
        assert qemu_pids(settings) == [pid]  # the VM outlived its atelet
        agent.start()
        channel, stub = agent.stub()
        async with channel:
            health = await stub.Health(pb.HealthRequest())
            assert [(w.name, w.sandbox_state) for w in health.workers] == [("microvm-0", "idle"),
                                                                           ("microvm-1", "running")]  # fmt: skip
            assert (await get(run.worker_ip))["memory_count"] == 2  # the same guest, not a reboot
            assert qemu_pids(settings) == [pid]
            uri = f"file://{Path(settings.snapshot_roots[0]).resolve()}/demo/vm1/9"
            saved = await stub.Checkpoint(pb.CheckpointRequest(operation_id=op(), worker="microvm-1", actor=ACTOR,
                                                               scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri))
            assert "checkpoint/ram" in {f.path for f in saved.manifest.files}
            assert qemu_pids(settings) == []  # the adopted QEMU ended with its checkpoint


# ---- the kill matrix's microvm cells ---------------------------------------------------------
# The workflows' kill matrix (tests/durability) parks each atelet call before the gRPC call, so
# the atelet it kills holds nothing of the call yet. What differs for a VM is a kill in the
# middle of the call: QEMU runs in its own session and outlives the atelet, stopped where the
# atelet left it. These cells kill the atelet there (failpoints in atelet/drivers/microvm/qemu.py)
# and re-send the same call, as the workflow's retry of the activity does.


async def wait_reached(failpoints: Path, name: str) -> None:
    async with asyncio.timeout(PROBE_SECONDS):
        while not (failpoints / f"{name}.reached").exists():
            await asyncio.sleep(0.05)


@contextlib.contextmanager
def microvm_agent(short_tmp: Path, kernel_dir: Path, extra: tuple[str, ...] = ()) -> Iterator[tuple[MicrovmAgent, Path]]:
    """A ``MicrovmAgent`` started (``extra``: more atelet flags) with its failpoints dir; at the end
    of a block that passed, stopped with SIGTERM, which must leave no VM; always cleaned up."""
    failpoints = short_tmp / "failpoints"
    failpoints.mkdir()
    agent = MicrovmAgent(make_settings(short_tmp), short_tmp, dict(os.environ, ATE_FAILPOINTS_DIR=str(failpoints)))
    agent.kernel_dir, agent.extra = kernel_dir, extra
    try:
        agent.start()
        yield agent, failpoints
        assert agent.sigterm() == 0
        assert_no_vm_left(agent.settings)
    finally:
        for process in agent.procs:
            if process.poll() is None:
                process.kill()
        kill_vms(agent.settings)
        force_cleanup(agent.settings)


async def run_on(agent: MicrovmAgent, worker: str) -> pb.RunResponse:
    """The counter started on ``worker`` of ``agent``, answering its first request (1, 1)."""
    channel, stub = agent.stub()
    async with channel:
        run = await stub.Run(pb.RunRequest(operation_id=op(), worker=worker, actor=ACTOR, spec=counter_spec(),
                                           probe_timeout_seconds=PROBE_SECONDS))  # fmt: skip
    assert await get(run.worker_ip) == {"ip": run.worker_ip, "memory_count": 1, "file_count": 1}
    return run


async def killed_during(agent: MicrovmAgent, failpoints: Path, name: str, call: Any) -> None:
    """Arm ``name``, make ``call`` (a coroutine function of a stub), SIGKILL the atelet once the
    call parks there, disarm, start the atelet again."""
    (failpoints / name).touch()
    channel, stub = agent.stub()
    async with channel:
        pending = asyncio.ensure_future(call(stub))
        await wait_reached(failpoints, name)
        agent.sigkill()
        with contextlib.suppress(grpc.aio.AioRpcError):
            await pending  # it dies with its atelet
    (failpoints / name).unlink()
    agent.start()


async def test_kill_cell_atelet_killed_after_qemu_saved_the_vm_in_a_checkpoint(
    short_tmp: Path, kernel_dir: Path, counter_image: str
) -> None:
    # QEMU has written the device state and stopped the guest; the atelet dies before it ends the
    # VM or stores the snapshot. The next atelet lets the VM run on (no memory lost), and the
    # re-sent Checkpoint completes from there: the restored actor counts on (3, 3).
    with microvm_agent(short_tmp, kernel_dir) as (agent, failpoints):
        settings = agent.settings
        uri = f"file://{Path(settings.snapshot_roots[0]).resolve()}/demo/vm1/1"
        request = pb.CheckpointRequest(operation_id=op(), worker="microvm-0", actor=ACTOR,
                                       scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri)  # fmt: skip
        run = await run_on(agent, "microvm-0")
        (pid,) = qemu_pids(settings)
        await killed_during(agent, failpoints, "Microvm.checkpoint.after_save", lambda s: s.Checkpoint(request))
        assert qemu_pids(settings) == [pid]  # adopted: the same QEMU
        assert await get(run.worker_ip) == {"ip": run.worker_ip, "memory_count": 2, "file_count": 2}
        channel, stub = agent.stub()
        async with channel:
            saved = await stub.Checkpoint(request)  # the activity's retry: same operation
            assert qemu_pids(settings) == []
            restored = await stub.Restore(restore_request("microvm-1", uri, saved.manifest))
            assert await get(restored.worker_ip) == {"ip": restored.worker_ip, "memory_count": 3, "file_count": 3}
            await stub.Terminate(pb.TerminateRequest(operation_id=op(), worker="microvm-1", actor=ACTOR))


async def test_kill_cell_atelet_killed_after_qemu_loaded_a_restore_on_another_worker(
    short_tmp: Path, kernel_dir: Path, counter_image: str
) -> None:
    # Saved on microvm-0, restored on microvm-1: QEMU has loaded the device state (the guest is
    # paused, still on microvm-0's address) and the atelet dies before it continues it. The next
    # atelet continues it and gives it microvm-1's address; the re-sent Restore finds it running
    # (started by this very operation) and answers; the actor counts on (2, 2) at the new address.
    with microvm_agent(short_tmp, kernel_dir) as (agent, failpoints):
        settings = agent.settings
        uri = f"file://{Path(settings.snapshot_roots[0]).resolve()}/demo/vm1/1"
        run = await run_on(agent, "microvm-0")
        channel, stub = agent.stub()
        async with channel:
            saved = await stub.Checkpoint(pb.CheckpointRequest(operation_id=op(), worker="microvm-0", actor=ACTOR,
                                                               scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri))
        request = restore_request("microvm-1", uri, saved.manifest)
        await killed_during(agent, failpoints, "Microvm.restore.after_load", lambda s: s.Restore(request))
        (pid,) = qemu_pids(settings)
        channel, stub = agent.stub()
        async with channel:
            restored = await stub.Restore(request)  # the activity's retry: same operation
            assert restored.worker_ip != run.worker_ip
            assert qemu_pids(settings) == [pid]  # the adopted VM, not a second restore
            assert await get(restored.worker_ip) == {"ip": restored.worker_ip, "memory_count": 2, "file_count": 2}
            await stub.Terminate(pb.TerminateRequest(operation_id=op(), worker="microvm-1", actor=ACTOR))


# ---- snapshots in object storage: the frozen path (freeze, save while left running, upload) ----


@pytest_asyncio.fixture
async def s3_atelet(
    short_tmp: Path, kernel_dir: Path, object_store: LocalObjectStore
) -> AsyncIterator[tuple[Atelet, str]]:
    location = f"s3://{object_store.bucket}/{uuid.uuid4().hex[:8]}"
    settings = microvm_settings(short_tmp, kernel_dir).model_copy(
        update={"object_store_locations": [location], "object_store_retry_seconds": 2}
    )
    try:
        async with running_atelet(settings) as a:
            yield a, location
        assert_no_vm_left(settings)
    finally:
        kill_vms(settings)
        force_cleanup(settings)


async def test_a_checkpoint_to_object_storage_keeps_the_vm_until_it_is_stored(
    s3_atelet: tuple[Atelet, str], counter_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Bound for S3, the VM is frozen, saved while it stays (the RAM file copied, not moved), its
    # durable dir read back from a copy of its disk, the snapshot uploaded, and only then ended.
    atelet, location = s3_atelet
    monkeypatch.setenv("ATE_FAILPOINTS_DIR", str(tmp_path))
    run = await run_counter(atelet, "microvm-0")
    assert await get(run.worker_ip) == {"ip": run.worker_ip, "memory_count": 1, "file_count": 1}
    (pid,) = qemu_pids(atelet.settings)
    uri = f"{location}/demo/actors/vm1/1-{uuid.uuid4().hex[:12]}"
    (tmp_path / "Atelet.checkpoint.before_upload").touch()
    attempt = asyncio.ensure_future(checkpoint(atelet, "microvm-0", pb.SNAPSHOT_SCOPE_FULL, uri))
    await wait_reached(tmp_path, "Atelet.checkpoint.before_upload")
    assert qemu_pids(atelet.settings) == [pid]  # saved, not yet stored: the VM is still there
    (tmp_path / "Atelet.checkpoint.before_upload").unlink()
    saved = await attempt
    assert {"checkpoint/ram", "checkpoint/state", "checkpoint/disk0", "volumes/data.tar"} <= {
        f.path for f in saved.manifest.files
    }
    assert qemu_pids(atelet.settings) == []  # ended once stored
    restored = await atelet.stub.Restore(restore_request("microvm-1", uri, saved.manifest))
    assert await get(restored.worker_ip) == {"ip": restored.worker_ip, "memory_count": 2, "file_count": 2}
    await atelet.stub.Terminate(pb.TerminateRequest(operation_id=op(), worker="microvm-1", actor=ACTOR))


async def test_the_store_dying_during_an_upload_lets_the_vm_run_on(
    s3_atelet: tuple[Atelet, str], counter_image: str, object_store: LocalObjectStore, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The upload fails after QEMU saved the VM (an outgoing migration completed, the guest
    # stopped): the VM is continued and runs on with its memory and its disk, as if nothing happened.
    atelet, location = s3_atelet
    monkeypatch.setenv("ATE_FAILPOINTS_DIR", str(tmp_path))
    run = await run_counter(atelet, "microvm-0")
    assert (await get(run.worker_ip))["memory_count"] == 1
    (pid,) = qemu_pids(atelet.settings)
    uri = f"{location}/demo/actors/vm1/1-{uuid.uuid4().hex[:12]}"
    (tmp_path / "Atelet.checkpoint.before_upload").touch()
    attempt = asyncio.ensure_future(checkpoint(atelet, "microvm-0", pb.SNAPSHOT_SCOPE_FULL, uri))
    try:
        await wait_reached(tmp_path, "Atelet.checkpoint.before_upload")
        object_store.kill()
        (tmp_path / "Atelet.checkpoint.before_upload").unlink()
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await attempt
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value.details()
        assert qemu_pids(atelet.settings) == [pid]  # the same VM, continued
        assert await get(run.worker_ip) == {"ip": run.worker_ip, "memory_count": 2, "file_count": 2}
    finally:
        if object_store.process is None:
            object_store.start()
    saved = await checkpoint(atelet, "microvm-0", pb.SNAPSHOT_SCOPE_FULL, uri.replace("/1-", "/2-"))
    assert "checkpoint/ram" in {f.path for f in saved.manifest.files}  # the next attempt works
    assert qemu_pids(atelet.settings) == []


def durable_count(settings: AteletSettings) -> str:
    """The counter's file in the actor's durable dir on the node (examples/counter: ``count.txt``)."""
    return (Path(settings.state_dir).resolve() / "actors/demo/vm1/volumes/data/count.txt").read_text()


async def test_a_vm_that_died_while_no_atelet_watched_leaves_its_durable_dir_current(
    short_tmp: Path, kernel_dir: Path, counter_image: str
) -> None:
    # The atelet is SIGKILLed, then the VM dies too: the next atelet cannot adopt it, and reads
    # its disk back into the durable dir before removing it (else the worker's next sandbox
    # would overwrite the only copy of what the actor wrote since it started).
    with microvm_agent(short_tmp, kernel_dir) as (agent, _):
        run = await run_on(agent, "microvm-0")
        assert (await get(run.worker_ip))["file_count"] == 2
        agent.sigkill()
        kill_vms(agent.settings)
        agent.start()
        channel, stub = agent.stub()
        async with channel:
            health = await stub.Health(pb.HealthRequest())
            assert [w.sandbox_state for w in health.workers] == ["idle", "idle"]
        assert durable_count(agent.settings).strip() == "2"


async def test_a_vm_saved_for_object_storage_is_not_continued_by_a_restarted_atelet(
    short_tmp: Path, kernel_dir: Path, counter_image: str, object_store: LocalObjectStore
) -> None:
    # Killed after QEMU saved the VM for an upload (the VM left stopped, its snapshot perhaps
    # stored): the next atelet cannot know whether the control plane now holds that snapshot
    # as the actor's, so it does not continue the VM (two instances of one actor), ends it and
    # keeps its durable dir; the retried Checkpoint then says the worker runs nothing.
    location = f"s3://{object_store.bucket}/{uuid.uuid4().hex[:8]}"
    extra = ("--object-store-location", location, "--object-store-retry-seconds", "2")
    with microvm_agent(short_tmp, kernel_dir, extra) as (agent, failpoints):
        request = pb.CheckpointRequest(operation_id=op(), worker="microvm-0", actor=ACTOR, scope=pb.SNAPSHOT_SCOPE_FULL,
                                       snapshot_uri=f"{location}/demo/actors/vm1/1-{uuid.uuid4().hex[:12]}")  # fmt: skip
        await run_on(agent, "microvm-0")
        await killed_during(agent, failpoints, "Atelet.checkpoint.before_upload", lambda s: s.Checkpoint(request))
        assert qemu_pids(agent.settings) == []  # not continued: ended
        assert durable_count(agent.settings).strip() == "1"
        channel, stub = agent.stub()
        async with channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Checkpoint(request)
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION, refused.value.details()


def test_a_node_of_microvm_workers_only_runs_no_gvisor_driver(short_tmp: Path, kernel_dir: Path) -> None:
    # no runsc asked for when the default pool has no worker (the microvm class alone)
    from atelet.main import pools_of
    from atelet.node import Node

    settings = microvm_settings(short_tmp, kernel_dir)
    assert set(Node(settings, pools_of(settings)).drivers) == {"microvm"}
