"""The driver of sandbox class ``microvm``: ``SandboxDriver`` over QEMU (``qemu.Vm``).

A sandbox is one VM: the guest kernel from ``kernel_dir`` (scripts/guest-kernel.sh), an
initramfs with the container's image and command (``initramfs``), the worker's address on a tap
bridged with the worker end (``network``), one ext4 disk per durable dir (``disk``). Its files
live in ``<root>/<container id>/`` (QMP socket, RAM file, QEMU's log, ``sandbox.json``: what
adoption and the disk read-back need); ``prepare`` writes the initramfs, the disks and
``plan.json`` into the worker's dir.

How the node's steps map onto a VM:

- ``checkpoint`` (FULL): the device state, the RAM file and a copy of each disk go into the
  snapshot's ``checkpoint/`` dir with ``vm.json`` (QEMU's version, machine, accelerator, device
  set; ``qemu.VmState``) and ``guest.json`` (the guest's address then); compression does not
  apply (the RAM file is stored as it is).
- The durable dirs stay the node's host dirs (what every snapshot archives): once the VM is
  stopped or frozen, each disk is read back into its dir (``disk.extract_disk``, from a copy, so
  a VM that is thawed keeps its disk untouched). So ``kill``, ``freeze`` and a checkpoint leave
  the dirs current, and a DATA checkpoint needs nothing of its own.
- ``launch`` with a checkpoint restores the VM (``qemu.Vm.restore``: RAM and disks as they were,
  copy-on-write where the filesystem allows) and, when it was saved on another address, gives the
  guest this worker's (``qemu.Vm.readdress``).

The runtime version (``version``: QEMU's version and package, the machine type, the
accelerator) goes into every FULL manifest: placement restores a FULL snapshot only on a worker
whose runtime matches (check 4), and the restore compares the whole recorded shape again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import re
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from atelet.bundle import build_config
from atelet.drivers.base import SandboxDriver
from atelet.drivers.microvm import disk, network, qemu
from atelet.drivers.microvm.initramfs import (
    INIT,
    NETWORK_MODULES,
    GuestImage,
    build_initramfs,
    command_for,
    with_dependencies,
)
from atelet.errors import AteletError, internal, invalid, not_found
from atelet.images import ImageStore
from atelet.netns import WorkerNet
from atelet.proto import atelet_pb2 as pb

log = logging.getLogger(__name__)

SANDBOX_CLASS = "microvm"
PLAN_FILE = "plan.json"
RECORD_FILE = "sandbox.json"
GUEST_FILE = "guest.json"
"""In a FULL checkpoint: the address the guest had when it was saved."""
DEFAULT_MEMORY_MIB = 256
"""Guest RAM when the template sets no memory limit."""
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,62})$")


@dataclass
class _Sandbox:
    """What the driver keeps per VM (``sandbox.json`` on disk; ``vm`` in memory only)."""

    workdir: Path
    config: qemu.VmConfig
    volumes: list[Path]
    address: str
    pid: int = 0
    machine: str = ""
    vm: qemu.Vm | None = None
    addressed: bool = False
    """The guest has ``address`` (booted with it, or told it after a restore)."""
    read_back: bool = False
    """The disks were read back into the durable dirs after the VM ended for good."""
    saved_running: bool = False
    """A checkpoint bound for object storage saved the VM and left it (stopped): whether that
    snapshot got stored is the node's to know, so a restarted atelet must not continue it."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def document(self) -> dict[str, Any]:
        c = self.config
        return {
            "pid": self.pid, "machine": self.machine, "address": self.address, "addressed": self.addressed,
            "read_back": self.read_back, "saved_running": self.saved_running,
            "volumes": [str(v) for v in self.volumes],
            "config": {"kernel": str(c.kernel), "initramfs": str(c.initramfs), "memory_mib": c.memory_mib,
                       "vcpus": c.vcpus, "accelerator": c.accelerator, "console": str(c.console),
                       "cmdline": c.cmdline, "netns": c.netns, "tap": c.tap, "mac": c.mac,
                       "disks": [str(d) for d in c.disks]},
        }  # fmt: skip

    @classmethod
    def load(cls, workdir: Path) -> _Sandbox:
        data = json.loads((workdir / RECORD_FILE).read_text())
        c = data["config"]
        config = qemu.VmConfig(Path(c["kernel"]), Path(c["initramfs"]), int(c["memory_mib"]), int(c["vcpus"]),
                               c["accelerator"], Path(c["console"]), c["cmdline"], c["netns"], c["tap"], c["mac"],
                               tuple(Path(d) for d in c["disks"]))  # fmt: skip
        return cls(workdir, config, [Path(v) for v in data["volumes"]], data["address"], int(data["pid"]),
                   data["machine"], addressed=bool(data.get("addressed")), read_back=bool(data.get("read_back")),
                   saved_running=bool(data.get("saved_running")))  # fmt: skip

    def save(self) -> None:
        if not self.workdir.is_dir():  # removed by delete meanwhile: nothing left to record
            return
        tmp = self.workdir / f".{RECORD_FILE}.tmp"
        tmp.write_text(json.dumps(self.document()))
        tmp.replace(self.workdir / RECORD_FILE)


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
        self._sandboxes: dict[str, _Sandbox] = {}
        self._version = ""
        self._machine = ""
        # the worker namespaces whose bridge and tap this process made: a node makes its workers'
        # namespaces once, at start, so they stay (bench/README.md, "microvm row": ~4 ip runs saved)
        self._bridged: dict[str, str] = {}

    @property
    def kernel(self) -> Path:
        """The guest kernel image."""
        return self.kernel_dir / "vmlinuz"

    def _modules_dir(self) -> Path:
        try:
            return next((self.kernel_dir / "lib/modules").iterdir())
        except (OSError, StopIteration):
            raise internal(f"no guest kernel modules in {self.kernel_dir}/lib/modules: run scripts/guest-kernel.sh"
                           " (scripts/install.sh does)") from None  # fmt: skip

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
        self._modules_dir()
        try:
            number, machine = await qemu.qemu_version(), await qemu.resolved_machine()
        except (OSError, qemu.VmError) as error:
            raise internal(f"microvm workers need {qemu.QEMU} (apt install qemu-system-x86): {error}") from None
        self._machine = machine
        kinds = ",".join(dict.fromkeys(qemu.DEVICE_KINDS))
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
        disk per durable dir (from its host dir, created when missing) and ``plan.json``.

        Raises:
            AteletError: INVALID_ARGUMENT for a command not in the image, INTERNAL for a disk
                that cannot be made.
        """
        container = spec.containers[0]
        image = await self.images.unpack(container.image, "spec.containers[0].image")
        for d in volume_dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        process = build_config(image, container, net.netns_path, volume_dirs).get("process", {})
        owner = process.get("user") or {}
        user = (int(owner.get("uid") or 0), int(owner.get("gid") or 0))
        try:
            command = command_for(list(process.get("args") or []), list(process.get("env") or []),
                                  process.get("cwd") or "/", image.rootfs, user)  # fmt: skip
        except ValueError as error:
            raise invalid(f"spec.containers[0].command: {error}") from None
        mounts = list(container.volume_mounts)
        names = (*NETWORK_MODULES, *disk.DISK_MODULES) if mounts else NETWORK_MODULES
        try:
            modules = with_dependencies(self._modules_dir(), names)
        except FileNotFoundError as error:
            raise internal(f"the guest kernel in {self.kernel_dir} lacks a module the VM needs: {error}") from None
        try:
            initramfs = await asyncio.to_thread(self._initramfs, GuestImage(command, modules=modules,
                                                                            rootfs=image.rootfs, user=user))  # fmt: skip
        except ValueError as error:
            raise invalid(f"spec.containers[0].image: {container.image} cannot be a microvm guest: {error}") from None
        except OSError as error:
            raise internal(f"the guest's initramfs could not be written: {error}") from None
        workdir.mkdir(parents=True, exist_ok=True)
        disks: list[str] = []
        volumes: list[str] = []
        words = [network.guest_cmdline(net)]
        if _HOSTNAME.match(hostname):
            words.append(f"ate.hostname={hostname}")
        for index, mount in enumerate(mounts):
            if not re.fullmatch(r"/[A-Za-z0-9._/-]*", mount.mount_path):
                raise invalid(f"spec.containers[0].volumeMounts[{index}].mountPath: {mount.mount_path!r} has "
                              "characters a microvm guest cannot mount at (letters, digits, . _ - / only)")  # fmt: skip
            image_path = workdir / f"disk{index}.img"
            try:
                await asyncio.to_thread(disk.build_disk, volume_dirs[mount.name], image_path, self.durable_dir_mib)
            except disk.DiskError as error:
                raise internal(f"durable dir {mount.name}: {error}") from None
            disks.append(str(image_path))
            volumes.append(str(volume_dirs[mount.name]))
            words.append(f"ate.mount=vd{chr(ord('a') + index)}:{mount.mount_path}")
        memory_mib = math.ceil(spec.memory_bytes / 2**20) if spec.memory_bytes > 0 else DEFAULT_MEMORY_MIB
        plan = {"initramfs": str(initramfs), "memory_mib": memory_mib,
                "vcpus": max(1, math.ceil(spec.cpu_millis / 1000)), "cmdline": " ".join(words),
                "disks": disks, "volumes": volumes}  # fmt: skip
        (workdir / PLAN_FILE).write_text(json.dumps(plan))
        return workdir

    def _initramfs(self, guest: GuestImage) -> Path:
        """The initramfs of ``guest``, built once per content (image, command, modules, init)."""
        key = hashlib.sha256()
        for part in (guest.command, str(guest.rootfs), *map(str, guest.modules), str(guest.busybox), str(guest.user)):
            key.update(part.encode() + b"\0")
        key.update(INIT.read_bytes())
        cache = self.root.parent / "microvm-initramfs"
        cache.mkdir(parents=True, exist_ok=True)
        path = cache / f"{key.hexdigest()[:32]}.cpio"
        if not path.exists():
            tmp = Path(tempfile.mkstemp(dir=cache, prefix=".build-")[1])
            try:
                build_initramfs(guest, tmp)
                tmp.replace(path)
            finally:
                tmp.unlink(missing_ok=True)
        return path

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
        config = qemu.VmConfig(self.kernel, Path(plan["initramfs"]), int(plan["memory_mib"]), int(plan["vcpus"]),
                               self.accelerator, log_path, plan["cmdline"], net.netns, tap, network.mac_for(net),
                               tuple(Path(d) for d in plan["disks"]))  # fmt: skip
        workdir = self.root / container_id
        address = f"{net.worker_ip}/{net.prefixlen} {net.host_ip}"
        try:  # recorded before QEMU starts, so that an atelet killed meanwhile adopts it as it is
            if checkpoint is None:
                machine = self._machine or await qemu.resolved_machine()
            else:
                saved = qemu.read_state(checkpoint)
                machine, config = saved.machine, replace(config, mac=saved.mac)
        except qemu.VmError as error:
            raise internal(f"the VM did not start: {error}") from None
        sandbox = _Sandbox(workdir, config, [Path(v) for v in plan["volumes"]], address, machine=machine)
        workdir.mkdir(parents=True, exist_ok=True)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        sandbox.save()  # before QEMU starts: a crash from here on leaves a dir to list and delete
        self._sandboxes[container_id] = sandbox
        try:
            if checkpoint is None:
                vm = await qemu.Vm.boot(config, workdir)
            else:
                vm = await qemu.Vm.restore(config, workdir, checkpoint)
        except qemu.VmError as error:
            raise internal(f"the VM did not start: {error}") from None
        sandbox.vm, sandbox.pid, sandbox.machine = vm, vm.process.pid, vm.machine
        sandbox.config = vm.config  # a restore keeps the card's MAC from the snapshot
        sandbox.addressed = checkpoint is None or _saved_address(checkpoint) == address
        sandbox.save()
        await self._address(sandbox)

    async def _address(self, sandbox: _Sandbox) -> None:
        """Gives the guest its worker's address unless it has it (a VM restored elsewhere)."""
        if sandbox.addressed or sandbox.vm is None:
            return
        ip, gateway = sandbox.address.split()
        try:
            await sandbox.vm.readdress(ip, gateway)
        except qemu.VmError as error:
            raise internal(f"the restored VM did not take this worker's address: {error}") from None
        sandbox.addressed = True
        sandbox.save()

    def _get(self, container_id: str) -> _Sandbox:
        sandbox = self._sandboxes.get(container_id)
        if sandbox is None:
            raise not_found(f"no microvm sandbox {container_id} on this node")
        return sandbox

    async def checkpoint(self, container_id: str, image_dir: Path, *, leave_running: bool = False,
                         compress: bool = True, journal: Path | None = None) -> None:
        """Saves the VM into ``image_dir`` (``qemu.Vm.checkpoint``) plus ``guest.json``, then
        reads the disks back into the durable dirs. ``compress`` does not apply; neither does
        ``journal``: QEMU's migration is driven from this process, so the save ends with it
        (``checkpoint_done`` then reports it failed).

        Raises:
            AteletError: NOT_FOUND, INTERNAL (QEMU's reason included).
        """
        sandbox = self._get(container_id)
        if sandbox.vm is None:
            raise not_found(f"microvm sandbox {container_id} is not running")
        try:
            await sandbox.vm.checkpoint(image_dir, leave_running=leave_running)
            (image_dir / GUEST_FILE).write_text(json.dumps({"address": sandbox.address}))
        except (qemu.VmError, OSError) as error:
            if sandbox.vm.process.returncode is not None:  # the VM ended with the failure: keep its disks' data
                with contextlib.suppress(AteletError):
                    await self._read_back(sandbox, final=True)
            raise internal(f"the VM's checkpoint failed: {error}") from None
        if leave_running:
            sandbox.saved_running = True
            sandbox.save()
        await self._read_back(sandbox, final=not leave_running)

    async def _read_back(self, sandbox: _Sandbox, *, final: bool) -> None:
        """Each disk into its durable dir, from a copy (the VM is stopped or frozen). ``final``:
        the VM will not run again, so later calls do nothing. It runs to its end even when the
        caller is cancelled (an exit watch cancelled by a stop): a cancelled read-back would
        leave a half-replaced dir. When a final one fails, the disk is moved next to its
        durable dir (named in the error) rather than left where the worker's next sandbox would
        overwrite it.

        Raises:
            AteletError: INTERNAL naming the durable dir and where its disk was kept.
        """
        await asyncio.shield(self._read_back_locked(sandbox, final))

    async def _read_back_locked(self, sandbox: _Sandbox, final: bool) -> None:
        async with sandbox.lock:
            if sandbox.read_back:
                return
            for image, target in zip(sandbox.config.disks, sandbox.volumes, strict=True):
                if not image.exists():
                    continue
                try:
                    scratch = Path(await asyncio.to_thread(tempfile.mkdtemp, dir=image.parent, prefix=".read-back-"))
                    try:
                        await asyncio.to_thread(qemu.copy_ram, image, scratch / image.name)
                        await asyncio.to_thread(disk.extract_disk, scratch / image.name, target)
                    finally:
                        await asyncio.to_thread(shutil.rmtree, scratch, True)
                except (disk.DiskError, qemu.VmError, OSError) as error:
                    kept = ""
                    if final:
                        with contextlib.suppress(OSError):
                            target.parent.mkdir(parents=True, exist_ok=True)
                            destination = target.parent / f".{target.name}.unread-{int(time.time())}.img"
                            await asyncio.to_thread(shutil.move, str(image), str(destination))
                            kept = f"; its disk is kept at {destination}"
                    log.error("durable dir %s could not be read back from its disk %s: %s%s", target, image, error, kept)
                    raise internal(f"durable dir {target.name} could not be read back from its disk: {error}{kept}") from None
            sandbox.read_back = final
            if final:
                sandbox.save()

    async def checkpoint_done(self, journal: Path) -> bool:
        """Never called (``follows_saves`` is False): a save this process did not drive cannot be told."""
        raise internal("the microvm save was driven by an atelet process that is gone; it did not complete")

    async def freeze(self, container_id: str) -> None:
        """Stops the guest's vCPUs and reads the disks back into the durable dirs."""
        sandbox = self._get(container_id)
        if sandbox.vm is None:
            raise not_found(f"microvm sandbox {container_id} is not running")
        try:
            await sandbox.vm.pause()
        except qemu.VmError as error:
            raise internal(f"microvm sandbox {container_id}: {error}") from None
        try:
            await self._read_back(sandbox, final=False)
        except AteletError:
            with contextlib.suppress(qemu.VmError):  # not frozen for nothing: the guest runs on
                await sandbox.vm.cont()
            raise

    async def thaw(self, container_id: str) -> None:
        """Lets the guest run again."""
        sandbox = self._get(container_id)
        if sandbox.vm is None:
            raise not_found(f"microvm sandbox {container_id} is not running")
        try:
            await sandbox.vm.cont()
        except qemu.VmError as error:
            raise internal(f"microvm sandbox {container_id}: {error}") from None
        if sandbox.saved_running:
            sandbox.saved_running = False
            sandbox.save()

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
        await self._read_back(sandbox, final=True)
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
                sandbox = _Sandbox.load(workdir)
                sandbox.pid = sandbox.pid or _pid_file(workdir)
                if sandbox.pid:
                    left = qemu.AdoptedProcess(sandbox.pid)  # a pidfd first, then the identity check
                    if _is_qemu_of(sandbox.pid, workdir):
                        left.kill()
                        await left.wait()
        if sandbox is not None and not sandbox.read_back:
            with contextlib.suppress(AteletError):  # logged, its disk kept
                await self._read_back(sandbox, final=True)
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

    async def reattach(self, container_id: str, net: WorkerNet, listed: set[str]) -> str:
        """Takes over the QEMU a previous atelet started (its pid in ``sandbox.json``, its monitor
        answering). A guest that atelet had stopped and not yet ended (killed during a checkpoint
        after QEMU saved it, during a freeze, or during a restore after QEMU loaded it) runs on
        from where it was, so the retried call finds the actor as before it; a restored guest
        is given this worker's address if it was not yet. A VM still loading its state is not
        adopted (the retried restore starts over)."""
        if container_id not in listed:
            return "no microvm dir for it any more"
        workdir = self.root / container_id
        try:
            sandbox = _Sandbox.load(workdir)
        except (OSError, ValueError, KeyError) as error:
            return f"its record is unreadable: {error}"
        sandbox.pid = sandbox.pid or _pid_file(workdir)
        if not sandbox.pid:
            return "its QEMU never started"
        try:
            vm = await qemu.Vm.attach(sandbox.config, workdir, sandbox.pid, sandbox.machine)
        except qemu.VmError as error:
            return str(error)
        try:
            status: Any = await vm.qmp.execute("query-status")
        except Exception as error:  # any monitor failure: not adoptable
            await vm.stop()
            return f"its monitor failed: {error}"
        state = status.get("status")
        try:
            if state == "postmigrate" and sandbox.saved_running:
                raise qemu.VmError("it had been saved by a checkpoint bound for object storage whose outcome only the "
                                   "control plane knows; it is not continued, so the actor never runs twice")  # fmt: skip
            if state in ("paused", "postmigrate"):
                log.warning("microvm sandbox %s was left %s by the previous atelet; letting it run on", container_id,
                            state)  # fmt: skip
                await vm.cont()
            elif state != "running":
                raise qemu.VmError(f"its guest is {state}, not running")
            sandbox.vm = vm
            await self._address(sandbox)
        except (qemu.VmError, AteletError) as error:
            await vm.stop()  # delete then reads its disks back
            return error.reason if isinstance(error, AteletError) else str(error)
        self._sandboxes[container_id] = sandbox
        return ""

    def exit_watch(self, container_id: str) -> VmExitWatch:
        """A watch of the VM's QEMU process.

        Raises:
            AteletError: NOT_FOUND for a sandbox this driver does not hold.
        """
        return VmExitWatch(self, self._get(container_id))


class VmExitWatch:
    """Watches one VM's QEMU for its exit (``ExitWatch``)."""

    def __init__(self, driver: MicrovmDriver, sandbox: _Sandbox) -> None:
        self.driver = driver
        self.sandbox = sandbox

    async def gone(self) -> None:
        """Returns once QEMU exited (the guest powered off, or QEMU died); the disks are then
        read back into the durable dirs."""
        assert self.sandbox.vm is not None
        await self.sandbox.vm.process.wait()
        with contextlib.suppress(AteletError):
            await self.driver._read_back(self.sandbox, final=True)

    async def reason(self, log_path: Path) -> str:
        """``the VM stopped (QEMU exit status N); last log line: ...`` (the guest's console, where
        ate's init says how the workload ended)."""
        assert self.sandbox.vm is not None
        code = self.sandbox.vm.process.returncode
        if code == -1 and isinstance(self.sandbox.vm.process, qemu.AdoptedProcess):
            status = "QEMU's exit status unknown: a previous atelet started it"
        elif code is not None and code < 0:
            status = f"QEMU killed by signal {-code} ({signal.Signals(-code).name})"
        else:
            status = f"QEMU exit status {code}"
        return f"the VM stopped ({status}); {_last_words(log_path)}"

    async def close(self) -> None:
        """Nothing to release."""


def _last_words(log_path: Path) -> str:
    """What ate's init said last on the console (how the workload ended), else the last line."""
    try:
        with log_path.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - 65536))
            lines = [line.strip() for line in f.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    said = [line for line in lines if line.startswith("ate-init: ")]
    if said:
        return f"ate's init said: {said[-1][len('ate-init: '):][:300]}"
    return f"last log line: {lines[-1][:300]}" if lines else "the log is empty"


def _saved_address(checkpoint: Path) -> str:
    with contextlib.suppress(OSError, ValueError, KeyError):
        return str(json.loads((checkpoint / GUEST_FILE).read_text())["address"])
    return ""


def _pid_file(workdir: Path) -> int:
    """The pid QEMU wrote into ``workdir`` (0 when none)."""
    with contextlib.suppress(OSError, ValueError):
        return int((workdir / qemu.PID_FILE).read_text().strip())
    return 0


def _is_qemu_of(pid: int, workdir: Path) -> bool:
    with contextlib.suppress(OSError):
        return str(workdir).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    return False
