"""The driver of sandbox class ``microvm``: ``SandboxDriver`` over QEMU (``qemu.Vm``).

A sandbox is one VM: the guest kernel from ``kernel_dir`` (scripts/guest-kernel.sh), an
initramfs with the container's image and command (``initramfs``), the worker's address on a tap
bridged with the worker end (``network``), one ext4 disk per durable dir (``disk``). Its files
live in ``<root>/<container id>/`` (QMP socket, RAM file, QEMU's log, ``sandbox.json``: what
adoption and the disk read-back need: ``sandbox_record``); ``prepare`` writes the initramfs, the
disks and ``plan.json`` into the worker's dir (``prepare.prepare_guest``).

How the node's steps map onto a VM:

- ``checkpoint`` (FULL): the device state, the RAM file and a copy of each disk go into the
  snapshot's ``checkpoint/`` dir with ``vm.json`` (QEMU's version, machine, accelerator, device
  set; ``vm_snapshot.VmState``) and ``guest.json`` (the guest's address then); compression does
  not apply (the RAM file is stored as it is).
- The durable dirs stay the node's host dirs (what every snapshot archives): once the VM is
  stopped or frozen, each disk is read back into its dir (``disk_read_back``, from a copy, so a
  VM that is thawed keeps its disk untouched). So ``kill``, ``freeze`` and a checkpoint leave the
  dirs current, and a DATA checkpoint needs nothing of its own.
- ``launch`` with a checkpoint restores the VM (``Vm.restore``: RAM and disks as they were,
  copy-on-write where the filesystem allows) and, when it was saved on another address, gives the
  guest this worker's (``Vm.readdress``).

An exit on its own is seen by ``exit_watch.VmExitWatch``. An exec (``exec_in``) runs through ate's
init in the guest (``Vm.exec``), over the same channel as ``readdress``.

The runtime version (``version``: QEMU's version and package, the machine type, the
accelerator) goes into every FULL manifest: placement restores a FULL snapshot only on a worker
whose runtime matches (check 4), and the restore compares the whole recorded shape again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from atelet.drivers.base import SandboxDriver
from atelet.drivers.microvm import network
from atelet.drivers.microvm.disk_read_back import read_back
from atelet.drivers.microvm.exit_watch import VmExitWatch
from atelet.drivers.microvm.prepare import PLAN_FILE, modules_dir, prepare_guest
from atelet.drivers.microvm.qemu import Vm
from atelet.drivers.microvm.qemu_process import QEMU, AdoptedProcess, qemu_version, resolved_machine
from atelet.drivers.microvm.sandbox_record import RECORD_FILE, SandboxRecord, qemu_pid
from atelet.drivers.microvm.vm_config import DEVICE_KINDS, VmConfig, VmError
from atelet.drivers.microvm.vm_snapshot import read_state
from atelet.egress.sandbox import SandboxEgress
from atelet.errors import AteletError, internal, not_found
from atelet.images import ImageStore
from atelet.netns import WorkerNet
from atelet.proto import atelet_pb2 as pb

log = logging.getLogger(__name__)

SANDBOX_CLASS = "microvm"
EXEC_OUTPUT_BYTES = (1 << 20) + 1
"""The most of an exec's stdout (and of its stderr) the guest sends back: 1 MiB and one byte, so
that exec_ops, which answers at most ``max_output_bytes`` (1 MiB by default), sees that a longer
output was cut."""
GUEST_FILE = "guest.json"
"""In a FULL checkpoint: the address the guest had when it was saved."""


class MicrovmDriver(SandboxDriver):
    """QEMU VMs, one per sandbox, under ``root``.

    Args:
        root: the driver's state dir (one dir per sandbox, plus the initramfs cache).
        images: where ``prepare`` unpacks the container's image.
        kernel_dir: the guest kernel: ``vmlinuz`` and ``lib/modules/<version>/``.
        accelerator: ``kvm`` or ``tcg`` (``atelet.drivers.microvm.accelerator`` chooses).
        durable_dir_mib: the size of each durable dir's disk (MiB; sparse on the host).
    """

    sandbox_class = SANDBOX_CLASS
    follows_saves = False
    exit_grace_seconds = 2.0

    def __init__(self, root: Path, images: ImageStore, kernel_dir: Path, accelerator: str,
                 durable_dir_mib: int = 256) -> None:
        self.root = root
        self.images = images
        self.kernel_dir = kernel_dir
        self.accelerator = accelerator
        self.durable_dir_mib = durable_dir_mib
        self._sandboxes: dict[str, SandboxRecord] = {}
        self._version = ""
        self._machine = ""
        # the worker namespaces whose bridge and tap this process made: a node makes its workers'
        # namespaces once, at start, so they stay (bench/README.md, "microvm row": ~4 ip runs saved)
        self._bridged: dict[str, str] = {}
        self._clock_tasks: set[asyncio.Task[None]] = set()  # clocks set after thaws
        # the node's egress settings (``atelet.egress.sandbox``; its CA bundle goes into the initramfs), set by the node
        self.egress: SandboxEgress | None = None

    @property
    def kernel(self) -> Path:
        """The guest kernel image."""
        return self.kernel_dir / "vmlinuz"

    async def version(self) -> str:
        """``QEMU <version> (<package>), machine <type>, accelerator <kvm|tcg>, devices <kinds>``
        (the kinds of device this build gives a VM; how many disks is the template's); also
        checks that the guest kernel is there.

        Raises:
            AteletError: INTERNAL when QEMU or the guest kernel is missing (what to run named).
        """
        if self._version:
            return self._version
        if not self.kernel.is_file():
            raise internal(f"no guest kernel at {self.kernel}: run scripts/guest-kernel.sh (scripts/install.sh does)")
        modules_dir(self.kernel_dir)
        try:
            number, machine = await qemu_version(), await resolved_machine()
        except (OSError, VmError) as error:
            raise internal(f"microvm workers need {QEMU} (apt install qemu-system-x86): {error}") from None
        self._machine = machine
        kinds = ",".join(dict.fromkeys(DEVICE_KINDS))
        self._version = f"QEMU {number}, machine {machine}, accelerator {self.accelerator}, devices {kinds}"
        return self._version

    async def list(self) -> list[str]:
        """The container IDs with a dir under ``root``."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and (p / RECORD_FILE).exists())

    async def prepare(self, workdir: Path, net: WorkerNet, spec: pb.WorkloadSpec,
                      volume_dirs: dict[str, Path], hostname: str) -> Path:
        """Unpacks the image, writes the guest's initramfs (cached per image and command), one
        disk per durable dir (from its host dir, created when missing) and ``plan.json``
        (``prepare.prepare_guest``).

        Raises:
            AteletError: INVALID_ARGUMENT for a command not in the image, INTERNAL for a disk
                that cannot be made.
        """
        return await prepare_guest(workdir, net, spec, volume_dirs, hostname, images=self.images,
                                   kernel_dir=self.kernel_dir, initramfs_cache=self.root.parent / "microvm-initramfs",
                                   durable_dir_mib=self.durable_dir_mib,
                                   egress=self.egress)  # fmt: skip

    async def launch(self, container_id: str, net: WorkerNet, prepared: Path, log_path: Path,
                     checkpoint: Path | None) -> None:
        """Bridges the worker end with the VM's tap, then boots the VM or restores it from
        ``checkpoint`` (and readdresses its guest when it was saved on another address).

        Raises:
            AteletError: INTERNAL when QEMU refused (its reason included).
        """
        plan = json.loads((prepared / PLAN_FILE).read_text())
        tap = self._bridged.get(net.netns) or await network.bridge_tap(net)
        self._bridged[net.netns] = tap
        await network.forget_guest_mac(net)  # the last VM's card on this worker may have had another MAC
        config = VmConfig(self.kernel, Path(plan["initramfs"]), int(plan["memory_mib"]), int(plan["vcpus"]),
                               self.accelerator, log_path, plan["cmdline"], net.netns, tap, network.mac_for(net),
                               tuple(Path(d) for d in plan["disks"]))  # fmt: skip
        workdir = self.root / container_id
        address = f"{net.worker_ip}/{net.prefixlen} {net.host_ip}"
        try:  # recorded before QEMU starts, so that an atelet killed meanwhile adopts it as it is
            if checkpoint is None:
                machine = self._machine or await resolved_machine()
            else:
                saved = read_state(checkpoint)
                machine, config = saved.machine, replace(config, mac=saved.mac)
        except VmError as error:
            raise internal(f"the VM did not start: {error}") from None
        sandbox = SandboxRecord(workdir, config, [Path(v) for v in plan["volumes"]], address, machine=machine)
        workdir.mkdir(parents=True, exist_ok=True)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        sandbox.save()  # before QEMU starts: a crash from here on leaves a dir to list and delete
        self._sandboxes[container_id] = sandbox
        try:
            if checkpoint is None:
                vm = await Vm.boot(config, workdir)
            else:
                vm = await Vm.restore(config, workdir, checkpoint)
        except VmError as error:
            raise internal(f"the VM did not start: {error}") from None
        sandbox.vm, sandbox.pid, sandbox.machine = vm, vm.process.pid, vm.machine
        sandbox.config = vm.config  # a restore keeps the card's MAC from the snapshot
        sandbox.addressed = checkpoint is None or _saved_address(checkpoint) == address
        sandbox.save()
        await self._address(sandbox)
        if checkpoint is not None:
            await self._set_clock(sandbox)

    async def _address(self, sandbox: SandboxRecord) -> None:
        """Gives the guest its worker's address unless it has it (a VM restored elsewhere)."""
        if sandbox.addressed or sandbox.vm is None:
            return
        ip, gateway = sandbox.address.split()
        try:
            await sandbox.vm.readdress(ip, gateway)
        except VmError as error:
            raise internal(f"the restored VM did not take this worker's address: {error}") from None
        sandbox.addressed = True
        sandbox.save()

    def _get(self, container_id: str) -> SandboxRecord:
        sandbox = self._sandboxes.get(container_id)
        if sandbox is None:
            raise not_found(f"no microvm sandbox {container_id} on this node")
        return sandbox

    def _running(self, container_id: str) -> tuple[SandboxRecord, Vm]:
        """The sandbox and its running VM; AteletError NOT_FOUND when there is none."""
        sandbox = self._get(container_id)
        if sandbox.vm is None:
            raise not_found(f"microvm sandbox {container_id} is not running")
        return sandbox, sandbox.vm

    async def checkpoint(self, container_id: str, image_dir: Path, *, leave_running: bool = False,
                         compress: bool = True, journal: Path | None = None) -> None:
        """Saves the VM into ``image_dir`` (``Vm.checkpoint``) plus ``guest.json``, then
        reads the disks back into the durable dirs. ``compress`` does not apply; neither does
        ``journal``: QEMU's migration is driven from this process, so the save ends with it
        (``checkpoint_done`` then reports it failed).

        Raises:
            AteletError: NOT_FOUND, INTERNAL (QEMU's reason included).
        """
        sandbox, vm = self._running(container_id)
        try:
            await vm.checkpoint(image_dir, leave_running=leave_running)
            (image_dir / GUEST_FILE).write_text(json.dumps({"address": sandbox.address}))
        except (VmError, OSError) as error:
            if vm.process.returncode is not None:  # the VM ended with the failure: keep its disks' data
                with contextlib.suppress(AteletError):
                    await read_back(sandbox, final=True)
            raise internal(f"the VM's checkpoint failed: {error}") from None
        if leave_running:
            sandbox.saved_running = True
            sandbox.save()
        await read_back(sandbox, final=not leave_running)


    async def checkpoint_done(self, journal: Path) -> bool:
        """Never called (``follows_saves`` is False): a save this process did not drive cannot be told."""
        raise internal("the microvm save was driven by an atelet process that is gone; it did not complete")

    async def pause_for_save(self, container_id: str) -> None:
        """Stops the guest's vCPUs and reads the disks back into the durable dirs."""
        sandbox, vm = self._running(container_id)
        try:
            await vm.pause()
        except VmError as error:
            raise internal(f"microvm sandbox {container_id}: {error}") from None
        try:
            await read_back(sandbox, final=False)
        except AteletError:
            with contextlib.suppress(VmError):  # not frozen for nothing: the guest runs on
                await vm.cont()
            raise

    async def resume_after_save(self, container_id: str) -> None:
        """Lets the guest run again."""
        sandbox, vm = self._running(container_id)
        try:
            await vm.cont()
        except VmError as error:
            raise internal(f"microvm sandbox {container_id}: {error}") from None
        if sandbox.saved_running:
            sandbox.saved_running = False
            sandbox.save()

    async def freeze_in_place(self, container_id: str) -> str:
        """QMP ``stop`` (idempotent): the vCPUs stop, the RAM stays in QEMU; the disks are not
        read back (the durable dirs are as current as a running VM's). Returns ``qmp stop``;
        raises AteletError NOT_FOUND or INTERNAL (QEMU's reason included)."""
        await self._qmp(container_id, "stop")
        return "qmp stop"

    async def thaw_in_place(self, container_id: str) -> str:
        """QMP ``cont``: the guest runs on from where it stopped; its clock is set to the host's
        right after (``_set_clock``, in the background: the guest's channel answers within its
        0.2 s poll, and a thaw is the hot tier's milliseconds). Returns ``qmp cont``; raises as
        ``freeze_in_place``."""
        await self._qmp(container_id, "cont")
        task = asyncio.create_task(self._set_clock_quietly(self._get(container_id)))
        self._clock_tasks.add(task)
        task.add_done_callback(self._clock_tasks.discard)
        return "qmp cont"

    async def _set_clock_quietly(self, sandbox: SandboxRecord) -> None:
        try:
            await self._set_clock(sandbox)
        except AteletError as error:
            log.warning("microvm sandbox %s: %s", sandbox.workdir.name, error.reason)

    async def _set_clock(self, sandbox: SandboxRecord) -> None:
        """The guest's wall clock set to the host's before traffic is admitted: a VM restored, or
        let run after a freeze, comes back with the time it was saved or stopped at (its clock
        does not run while QEMU holds it). A VM whose init predates this keeps its stale clock,
        and the log says so.

        Raises:
            AteletError: INTERNAL when the guest does not answer.
        """
        if sandbox.vm is None:
            return
        try:
            if not await sandbox.vm.set_clock():
                log.warning("microvm sandbox %s: its init cannot set the clock (booted by an older atelet); its "
                            "wall clock stays where it was saved", sandbox.workdir.name)  # fmt: skip
        except VmError as error:
            raise internal(f"the guest did not set its clock: {error}") from None

    async def _qmp(self, container_id: str, command: str) -> None:
        _, vm = self._running(container_id)
        try:
            await (vm.pause() if command == "stop" else vm.cont())
        except VmError as error:
            raise internal(f"microvm sandbox {container_id}: {error}") from None

    async def kill(self, container_id: str) -> bool:
        """Ends QEMU, then reads the disks back into the durable dirs.

        Returns:
            True when a running VM was there.

        Raises:
            AteletError: INTERNAL when a disk could not be read back (the VM is gone anyway;
                the error says where its disk was kept).
        """
        sandbox = self._sandboxes.get(container_id)
        if sandbox is None or sandbox.vm is None:
            return False
        running = sandbox.vm.process.returncode is None
        await sandbox.vm.stop()
        await read_back(sandbox, final=True)
        return running

    async def delete(self, container_id: str) -> bool:
        """Ends QEMU if it runs and removes the sandbox's dir. A VM whose disks were not read
        back after it ended (it died while no atelet watched, or this atelet refused to adopt
        it) has them read back first: its durable dirs stay the actor's (a failure is logged and
        the disk kept, never raised).

        Returns:
            False when there was no such sandbox.
        """
        sandbox = self._sandboxes.pop(container_id, None)
        workdir = self.root / container_id
        if sandbox is None and not workdir.exists():
            return False
        if sandbox is not None and sandbox.vm is not None:
            await sandbox.vm.stop()
        elif sandbox is None:
            with contextlib.suppress(OSError, ValueError, KeyError):
                sandbox = SandboxRecord.load(workdir)
                sandbox.pid = sandbox.pid or qemu_pid(workdir)
                if sandbox.pid:
                    left = AdoptedProcess(sandbox.pid)  # a pidfd first, then the identity check
                    if _is_qemu_of(sandbox.pid, workdir):
                        left.kill()
                        await left.wait()
        if sandbox is not None and not sandbox.read_back:
            with contextlib.suppress(AteletError):  # logged, its disk kept
                await read_back(sandbox, final=True)
        await asyncio.to_thread(shutil.rmtree, workdir, True)
        return True

    async def delete_quietly(self, container_id: str) -> None:
        """``delete``, logging a failure."""
        try:
            await self.delete(container_id)
        except (AteletError, OSError) as error:
            log.warning("delete of microvm sandbox %s failed: %s", container_id, error)

    async def alive(self, container_id: str) -> bool:
        """True while the VM's QEMU runs (False for an unknown sandbox)."""
        sandbox = self._sandboxes.get(container_id)
        return sandbox is not None and sandbox.vm is not None and sandbox.vm.process.returncode is None

    async def reattach(self, container_id: str, net: WorkerNet, listed: set[str], *, frozen: bool = False) -> str:
        """Takes over the QEMU a previous atelet started (its pid in ``sandbox.json``, its monitor
        answering). A guest that atelet had stopped and not yet ended (killed during a checkpoint
        after QEMU saved it, during a freeze, or during a restore after QEMU loaded it) runs on
        from where it was, so the retried call finds the actor as before it; a restored guest
        is given this worker's address if it was not yet. A VM still loading its state is not
        adopted (the retried restore starts over). A VM recorded ``frozen`` (Freeze) stays
        stopped, and is stopped should it run."""
        if container_id not in listed:
            return "no microvm dir for it any more"
        workdir = self.root / container_id
        try:
            sandbox = SandboxRecord.load(workdir)
        except (OSError, ValueError, KeyError) as error:
            return f"its record is unreadable: {error}"
        sandbox.pid = sandbox.pid or qemu_pid(workdir)
        if not sandbox.pid:
            return "its QEMU never started"
        try:
            vm = await Vm.attach(sandbox.config, workdir, sandbox.pid, sandbox.machine)
        except VmError as error:
            return str(error)
        try:
            status: Any = await vm.qmp.execute("query-status")
        except Exception as error:  # any monitor failure: not adoptable
            await vm.stop()
            return f"its monitor failed: {error}"
        state = status.get("status")
        try:
            if state == "postmigrate" and sandbox.saved_running:
                raise VmError("it had been saved by a checkpoint bound for object storage whose outcome only the "
                              "control plane knows; it is not continued, so the actor never runs twice")  # fmt: skip
            if frozen and state in ("paused", "running"):
                if state == "running":
                    await vm.pause()
            elif state in ("paused", "postmigrate"):
                log.warning("microvm sandbox %s was left %s by the previous atelet; letting it run on", container_id,
                            state)  # fmt: skip
                await vm.cont()
            elif state != "running":
                raise VmError(f"its guest is {state}, not running")
            sandbox.vm = vm
            if not frozen:  # a frozen guest is given its address once it runs again (a restore's is done then)
                await self._address(sandbox)
        except (VmError, AteletError) as error:
            await vm.stop()  # delete then reads its disks back
            return error.reason if isinstance(error, AteletError) else str(error)
        self._sandboxes[container_id] = sandbox
        return ""

    can_exec = True

    async def exec_in(self, container_id: str, command: Sequence[str], stdout: Path, stderr: Path) -> int:
        """Runs ``command`` in the guest through ate's init (``Vm.exec``), its output into the
        files ``stdout`` and ``stderr`` once it ends (the first ``EXEC_OUTPUT_BYTES`` of each);
        cancelling the call kills it in the guest.

        Raises:
            AteletError: NOT_FOUND for a sandbox that is not running; INTERNAL when the guest
                does not answer.
        """
        _, vm = self._running(container_id)
        try:
            status, out, err = await vm.exec(command, EXEC_OUTPUT_BYTES)
        except VmError as error:
            raise internal(f"microvm sandbox {container_id}: exec: {error}") from None
        stdout.write_bytes(out)
        stderr.write_bytes(err)
        return status

    def exit_watch(self, container_id: str) -> VmExitWatch:
        """A watch of the VM's QEMU process.

        Raises:
            AteletError: NOT_FOUND for a sandbox this driver does not hold.
        """
        return VmExitWatch(self._get(container_id))


def _saved_address(checkpoint: Path) -> str:
    with contextlib.suppress(OSError, ValueError, KeyError):
        return str(json.loads((checkpoint / GUEST_FILE).read_text())["address"])
    return ""


def _is_qemu_of(pid: int, workdir: Path) -> bool:
    with contextlib.suppress(OSError):
        return str(workdir).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    return False
