"""The microvm class's QEMU back end on real QEMU (TCG: nested KVM does not run guests here,
MICROVM.md) with Debian's cloud kernel (scripts/guest-kernel.sh) and ate's own init: a guest
boots and runs its command; a checkpoint keeps its memory (a counter in a shell variable goes on
from where it was, not from 1); a restore with a corrupted device state or another shape is
refused with a reason."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from atelet import netns, proc
from atelet.drivers.microvm.disk import DISK_MODULES, build_disk, extract_disk
from atelet.drivers.microvm.initramfs import (
    NETWORK_MODULES,
    GuestImage,
    build_initramfs,
    command_for,
    with_dependencies,
)
from atelet.drivers.microvm.network import bridge_tap, forget_guest_mac, guest_cmdline, mac_for
from atelet.drivers.microvm.qemu import STATE_FILE, Vm, VmConfig, VmError, read_state
from atelet.images import ImageStore
from atelet.netns import WorkerNet

pytestmark = [pytest.mark.qemu, pytest.mark.timeout(180)]
ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD_SECONDS = 90  # TCG boots the kernel in a few seconds; a hang fails instead
COUNTER = "i=0; while true; do i=$((i+1)); echo count $i; sleep 0.1; done\n"


@pytest.fixture(scope="module")
def kernel(kernel_dir: Path) -> Path:
    return kernel_dir / "vmlinuz"


def config(tmp_path: Path, kernel: Path, memory_mib: int = 128) -> VmConfig:
    initramfs = build_initramfs(GuestImage(COUNTER), tmp_path / "initramfs.cpio")
    return VmConfig(kernel, initramfs, memory_mib, 1, "tcg", tmp_path / "console.log")


async def counts(console: Path, above: int) -> int:
    """The counter's last value on the console, once it is above ``above``."""
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        while True:
            found = re.findall(r"count (\d+)", console.read_text(errors="replace") if console.exists() else "")
            if found and int(found[-1]) > above:
                return int(found[-1])
            await asyncio.sleep(0.05)


async def test_a_guest_boots_ate_init_and_runs_its_command(tmp_path: Path, kernel: Path) -> None:
    vm = await Vm.boot(config(tmp_path, kernel), tmp_path / "vm")
    try:
        assert await counts(tmp_path / "console.log", 2) > 2
        assert "ate-init: running the workload" in (tmp_path / "console.log").read_text(errors="replace")
        assert re.fullmatch(r"pc-q35-\d+\.\d+", vm.machine), vm.machine  # the alias resolved
    finally:
        await vm.stop()


async def test_a_checkpoint_keeps_the_guests_memory_across_a_restore(tmp_path: Path, kernel: Path) -> None:
    cfg = config(tmp_path, kernel)
    vm = await Vm.boot(cfg, tmp_path / "vm1")
    async with stopping_on_failure(vm):
        await counts(cfg.console, 3)
    state = await vm.checkpoint(tmp_path / "snap")
    assert vm.process.returncode is not None  # the checkpoint ended that VM
    before = await counts(cfg.console, 0)
    assert (state.machine, state.memory_mib, state.vcpus) == (vm.machine, 128, 1)
    assert read_state(tmp_path / "snap") == state
    restored = await Vm.restore(cfg, tmp_path / "vm2", tmp_path / "snap")
    try:
        after = await counts(cfg.console, before)
    finally:
        await restored.stop()
    text = cfg.console.read_text(errors="replace")
    values = [int(v) for v in re.findall(r"count (\d+)", text)]
    assert values[values.index(before) + 1] == before + 1  # it went on from where it was
    assert text.count("ate-init: running the workload") == 1  # no second boot
    assert after > before


async def test_a_restore_of_a_damaged_state_is_refused_with_qemus_reason(tmp_path: Path, kernel: Path) -> None:
    # A stream QEMU cannot read (its header overwritten). Damage further in, e.g. in a ROM's
    # bytes, QEMU does not notice: that is what the snapshot manifest's SHA-256 digests, checked
    # before any restore, are for.
    cfg = config(tmp_path, kernel)
    await checkpointed(cfg, tmp_path / "vm1", tmp_path / "snap")
    state_file = tmp_path / "snap" / STATE_FILE
    data = bytearray(state_file.read_bytes())
    assert data[:4] == b"QEVM"  # QEMU's migration stream
    data[:8] = b"\xff" * 8
    state_file.write_bytes(bytes(data))
    refused = await restore_refused(cfg, tmp_path / "vm2", tmp_path / "snap")
    assert "QEMU could not load the device state and exited with 1" in refused, refused
    assert "migration" in refused.lower(), refused  # QEMU's own words are in it


async def test_a_restore_with_another_shape_is_refused_before_qemu_starts(tmp_path: Path, kernel: Path) -> None:
    cfg = config(tmp_path, kernel)
    await checkpointed(cfg, tmp_path / "vm1", tmp_path / "snap")
    bigger = config(tmp_path, kernel, memory_mib=256)
    refused = await restore_refused(bigger, tmp_path / "vm2", tmp_path / "snap")
    assert "128 MiB, 1 vCPU; this node would restore it with QEMU" in refused and "256 MiB" in refused, refused
    assert not (tmp_path / "vm2").exists()  # refused before anything started


@contextlib.asynccontextmanager
async def stopping_on_failure(vm: Vm) -> AsyncIterator[Vm]:
    """The block's failure (a wait that timed out, a wrong answer) stops ``vm`` before it propagates."""
    try:
        yield vm
    except BaseException:
        await vm.stop()
        raise


async def checkpointed(cfg: VmConfig, workdir: Path, snapshot: Path) -> None:
    """Boot a VM, let its counter run, checkpoint it into ``snapshot`` (stopped on any failure)."""
    vm = await Vm.boot(cfg, workdir)
    async with stopping_on_failure(vm):
        await counts(cfg.console, 1)
    await vm.checkpoint(snapshot)


async def restore_refused(cfg: VmConfig, workdir: Path, snapshot: Path) -> str:
    """The message of the VmError the restore raises (a restore that succeeds is stopped and fails the test)."""
    try:
        restored = await Vm.restore(cfg, workdir, snapshot)
    except VmError as error:
        return str(error)
    await restored.stop()
    pytest.fail(f"the restore of {snapshot} was not refused")


SERVER = (
    "mkdir -p /www; i=0\n"
    "busybox httpd -p 8080 -h /www\n"
    "while true; do i=$((i+1)); echo \"count $i\" > /www/index.html; sleep 0.1; done\n"
)


@pytest.fixture
async def worker_net() -> AsyncIterator[WorkerNet]:
    """A worker network namespace as the atelet makes one (atelet.netns), for the VM's card."""
    net = netns.plan("microvm-test", "w0", 0, "10.201.7.0/24")
    await netns.create(net)
    try:
        yield net
    finally:
        await netns.destroy(net)


async def http_count(address: str, above: int = 0) -> int:
    """GET / of the guest's httpd until it answers a count above ``above``; that count."""
    async with asyncio.timeout(HANG_GUARD_SECONDS), httpx.AsyncClient(timeout=2, trust_env=False) as client:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                resp = await client.get(f"http://{address}:8080/")
                if resp.status_code == 200 and resp.text.startswith("count ") and int(resp.text.split()[1]) > above:
                    return int(resp.text.split()[1])
            await asyncio.sleep(0.05)


async def test_the_guest_serves_on_the_worker_address_before_and_after_a_restore(
    tmp_path: Path, kernel: Path, worker_net: WorkerNet
) -> None:
    # The guest owns the worker's IP (the host reaches it as it reaches a gVisor worker); after
    # a checkpoint and a restore its server answers again, and its counter went on from where
    # the checkpoint left it (no second boot: it would start from 1 again).
    tap = await bridge_tap(worker_net)
    modules = with_dependencies(modules_dir(kernel), NETWORK_MODULES)
    initramfs = build_initramfs(GuestImage(SERVER, modules=modules), tmp_path / "initramfs.cpio")
    cfg = VmConfig(kernel, initramfs, 128, 1, "tcg", tmp_path / "console.log", guest_cmdline(worker_net),
                   netns=worker_net.netns, tap=tap, mac=mac_for(worker_net))  # fmt: skip
    vm = await Vm.boot(cfg, tmp_path / "vm1")
    async with stopping_on_failure(vm):
        before = await http_count(worker_net.worker_ip, above=20)  # a reboot would count from 1 again
    state = await vm.checkpoint(tmp_path / "snap")
    assert state.devices == ("serial:chardev-file", "virtio-net-pci", "virtserialport:ate.agent")
    restored = await Vm.restore(cfg, tmp_path / "vm2", tmp_path / "snap")
    try:
        first = await http_count(worker_net.worker_ip)  # the count it had (or one more): not from 1
        later = await http_count(worker_net.worker_ip, above=first)  # and it goes on
    finally:
        await restored.stop()
    assert before <= first < later
    assert (tmp_path / "console.log").read_text(errors="replace").count("ate-init: running the workload") == 1


async def test_the_counter_image_keeps_its_memory_across_a_checkpoint(
    tmp_path: Path, kernel: Path, worker_net: WorkerNet
) -> None:
    # The example actor's own OCI image as the guest's root filesystem, its command and env as
    # the template gives them: two requests, a checkpoint, a restore, and the third request
    # sees memory_count 3 (FULL keeps memory), on the same worker address.
    cfg, url = await counter_vm(tmp_path, kernel, worker_net)
    vm = await Vm.boot(cfg, tmp_path / "vm1")
    async with stopping_on_failure(vm):
        counts = [(await counter(url, first=True))[0], (await counter(url))[0]]
    await vm.checkpoint(tmp_path / "snap")
    restored = await Vm.restore(cfg, tmp_path / "vm2", tmp_path / "snap")
    try:
        counts.append((await counter(url))[0])
    finally:
        await restored.stop()
    assert counts == [1, 2, 3]


async def counter_vm(tmp_path: Path, kernel: Path, net: WorkerNet, disk: Path | None = None) -> tuple[VmConfig, str]:
    """The VM of the example counter image on worker network ``net`` (its command and env as
    the template gives them; /data on ``disk``, else in the guest's RAM), and the counter's URL."""
    image = await ImageStore([ROOT], tmp_path / "images").unpack("oci:examples/counter/oci:latest")
    env = [*image.config["process"].get("env", []), "DATA_DIR=/data", "PORT=8080"]
    command = command_for(["/counter"], env, "/", image.rootfs)
    names = (*NETWORK_MODULES, *DISK_MODULES) if disk else NETWORK_MODULES
    guest = GuestImage(command if disk else "mkdir -p /data\n" + command, modules=with_dependencies(modules_dir(kernel), names),
                       rootfs=image.rootfs)  # fmt: skip
    initramfs = build_initramfs(guest, tmp_path / "initramfs.cpio")
    cmdline = guest_cmdline(net) + (" ate.mount=vda:/data" if disk else "")
    cfg = VmConfig(kernel, initramfs, 256, 1, "tcg", tmp_path / "console.log", cmdline, netns=net.netns,
                   tap=await bridge_tap(net), mac=mac_for(net), disks=(disk,) if disk else ())  # fmt: skip
    return cfg, f"http://{net.worker_ip}:8080/"


def modules_dir(kernel: Path) -> Path:
    """``lib/modules/<version>`` next to the unpacked guest kernel."""
    return next((kernel.parent / "lib/modules").iterdir())


async def test_a_durable_dir_rides_along_on_a_disk_and_comes_back_as_a_dir(
    tmp_path: Path, kernel: Path, worker_net: WorkerNet
) -> None:
    # The counter's /data is a host dir made into a disk image: its file count goes on from the
    # host's 41 through a checkpoint and a restore (the image is part of the snapshot), the dir
    # read back after the VM stopped has the last count, and a cold boot from that dir (a DATA
    # resume) starts memory_count again at 1 but the file count where it was.
    durable = tmp_path / "durable"
    durable.mkdir()
    (durable / "count.txt").write_text("41\n")
    disk = build_disk(durable, tmp_path / "data.img", 16)
    cfg, url = await counter_vm(tmp_path, kernel, worker_net, disk)
    vm = await Vm.boot(cfg, tmp_path / "vm1")
    async with stopping_on_failure(vm):
        seen = [await counter(url, first=True), await counter(url)]
    await vm.checkpoint(tmp_path / "snap")
    other = tmp_path / "other"
    other.mkdir()
    (other / "count.txt").write_text("1000\n")
    build_disk(other, disk, 16)  # the image changed after the checkpoint: the restore must not use it
    restored = await Vm.restore(cfg, tmp_path / "vm2", tmp_path / "snap")
    try:
        seen.append(await counter(url))
    finally:
        await restored.stop()  # stopped at once, as a DATA checkpoint kills the sandbox
    assert seen == [(1, 42), (2, 43), (3, 44)]
    extract_disk(disk, durable)
    assert (durable / "count.txt").read_text() == "44\n"
    cold = await Vm.boot(replace(cfg, disks=(build_disk(durable, tmp_path / "data2.img", 16),)), tmp_path / "vm3")
    try:
        assert await counter(url, first=True) == (1, 45)
    finally:
        await cold.stop()


async def counter(url: str, first: bool = False) -> tuple[int, int]:
    """GET ``url`` of the counter (waiting for it to listen when ``first``): (memory_count, file_count)."""
    async with asyncio.timeout(HANG_GUARD_SECONDS), httpx.AsyncClient(timeout=10, trust_env=False) as client:
        while True:
            try:
                body = (await client.get(url)).json()
                return int(body["memory_count"]), int(body["file_count"])
            except httpx.TransportError:
                if not first:
                    raise
            await asyncio.sleep(0.1)


async def test_a_durable_dir_that_does_not_mount_stops_the_vm_with_a_reason(tmp_path: Path, kernel: Path) -> None:
    # No disk behind ate.mount: the workload must not run on a RAM /data that nobody keeps.
    initramfs = build_initramfs(GuestImage(COUNTER, modules=with_dependencies(modules_dir(kernel), DISK_MODULES)),
                                tmp_path / "initramfs.cpio")  # fmt: skip
    cfg = VmConfig(kernel, initramfs, 128, 1, "tcg", tmp_path / "console.log", "ate.mount=vda:/data")
    vm = await Vm.boot(cfg, tmp_path / "vm")
    try:
        await asyncio.wait_for(vm.process.wait(), HANG_GUARD_SECONDS)  # it powered itself off
    finally:
        await vm.stop()
    console = cfg.console.read_text(errors="replace")
    assert "ate-init: durable dir /dev/vda did not mount on /data; stopping the VM" in console
    assert "running the workload" not in console


async def test_a_vm_restored_on_another_worker_takes_that_workers_address(
    tmp_path: Path, kernel: Path, worker_net: WorkerNet
) -> None:
    # Checkpointed on worker 0, restored on worker 1 (another namespace, another /30): told its
    # new address through ate's channel, the counter answers there with its memory.
    cfg, url = await counter_vm(tmp_path, kernel, worker_net)
    vm = await Vm.boot(cfg, tmp_path / "vm1")
    async with stopping_on_failure(vm):
        counts = [(await counter(url, first=True))[0]]
    await vm.checkpoint(tmp_path / "snap")
    other = netns.plan("microvm-test", "w1", 1, "10.201.7.0/24")
    await netns.create(other)
    try:
        moved = replace(cfg, cmdline=guest_cmdline(other), netns=other.netns, tap=await bridge_tap(other),
                        mac=mac_for(other))  # fmt: skip
        restored = await Vm.restore(moved, tmp_path / "vm2", tmp_path / "snap")
        try:
            await restored.readdress(f"{other.worker_ip}/{other.prefixlen}", other.host_ip)
            counts.append((await counter(f"http://{other.worker_ip}:8080/"))[0])
        finally:
            await restored.stop()
    finally:
        await netns.destroy(other)
    assert counts == [1, 2]


async def test_the_host_forgets_the_mac_it_learnt_for_a_worker_ip_before_a_vm_starts(worker_net: WorkerNet) -> None:
    # A VM restored on this worker had its snapshot's MAC; the next one (a fresh boot) has the
    # worker's own. A neighbour entry kept for the first would take the second's packets to the
    # first's card for ~30 s (a wakeup probe timed out with the counter listening).
    ip, dev = worker_net.worker_ip, worker_net.host_if
    learnt = await proc.run(["ip", "neigh", "replace", ip, "lladdr", "52:54:0a:c9:07:06", "nud", "reachable",
                             "dev", dev])  # fmt: skip
    assert learnt.ok, learnt.describe()
    assert "52:54:0a:c9:07:06" in (await proc.run(["ip", "neigh", "show", "to", ip, "dev", dev])).stdout
    await forget_guest_mac(worker_net)
    assert (await proc.run(["ip", "neigh", "show", "to", ip, "dev", dev])).stdout.strip() == ""
    await forget_guest_mac(worker_net)  # nothing to forget: no error


async def test_the_containers_user_runs_the_workload_and_the_images_users_stay(tmp_path: Path, kernel: Path) -> None:
    # process.user (1000, 100): the command runs as that uid and gid, not as the guest's root;
    # the image's own passwd entries are kept beside the one ate adds.
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\napp:x:1000:100::/home/app:/bin/sh\n")
    command = command_for(["/.ate/bin/sh", "-c", "/.ate/bin/id; /.ate/bin/grep -c :x: /etc/passwd"], [], "/", None,
                          user=(1000, 100))  # fmt: skip
    initramfs = build_initramfs(GuestImage(command, rootfs=rootfs, user=(1000, 100)), tmp_path / "initramfs.cpio")
    cfg = VmConfig(kernel, initramfs, 128, 1, "tcg", tmp_path / "console.log")
    vm = await Vm.boot(cfg, tmp_path / "vm")
    try:
        await asyncio.wait_for(vm.process.wait(), HANG_GUARD_SECONDS)  # the workload ends, the VM powers off
    finally:
        await vm.stop()
    console = cfg.console.read_text(errors="replace")
    assert "uid=1000(app) gid=100" in console, console[-800:]  # id names the image's first entry of uid 1000
    assert "\n3\r" in console or "\n3\n" in console, console[-800:]  # root, app and ate's entry
