"""The microvm class's VMM back end: one QEMU process per VM, driven over QMP (``qemu.qmp``).

A VM's RAM is a file (``memory-backend-file``, ``share=on``): what the guest writes lands in it,
so a checkpoint only has to save the device state (``migrate`` with ``x-ignore-shared``: the RAM
is left out of the stream) and the RAM file is the memory part of the snapshot. A restore starts
QEMU with the same machine and devices on a copy of that RAM file (a reflink where the
filesystem has them) and ``-incoming defer``, loads the device state and continues the guest.
MICROVM.md has the measurements this follows (TCG here: nested KVM does not run guests).

A checkpoint records what a restore needs to match (``VmState``: QEMU's version, the resolved
machine type and the device set); QEMU's migration format holds only between equal ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from qemu.qmp import QMPClient

QEMU = "qemu-system-x86_64"
MACHINE = "q35"
"""The machine type asked for (an alias QEMU resolves to its versioned type, e.g. pc-q35-7.2)."""
SERIAL = "serial:chardev-file"
NIC = "virtio-net-pci"
DISK = "virtio-blk-pci"
STATE_FILE = "state"
"""The device-state file of a checkpoint (next to ``RAM_FILE`` and ``META_FILE``)."""
RAM_FILE = "ram"
META_FILE = "vm.json"


class VmError(Exception):
    """A VM did not start, checkpoint or restore; the message says which and QEMU's reason."""


@dataclass(frozen=True)
class VmConfig:
    """One VM's shape and files.

    Attributes:
        kernel: The guest kernel (``vmlinuz``).
        initramfs: The guest's initramfs (atelet.drivers.microvm.initramfs).
        memory_mib: Guest RAM, MiB (the template's memory limit).
        vcpus: Virtual CPUs (the template's CPU limit, rounded up).
        accelerator: ``kvm`` (production) or ``tcg`` (software emulation, as here).
        console: The file the guest's serial console is appended to.
        cmdline: Extra kernel command line.
        netns: The worker's network namespace QEMU runs in (None: no network card).
        tap: The tap device of the card, in ``netns`` (atelet.drivers.microvm.network).
        mac: The card's MAC address.
        disks: Disk images, one virtio-blk card each (``vda``, ``vdb``... in the guest), in order:
            the durable dirs (atelet.drivers.microvm.disk).
    """

    kernel: Path
    initramfs: Path
    memory_mib: int
    vcpus: int
    accelerator: str
    console: Path
    cmdline: str = ""
    netns: str | None = None
    tap: str = ""
    mac: str = ""
    disks: tuple[Path, ...] = ()

    @property
    def devices(self) -> tuple[str, ...]:
        """The device set (recorded in ``VmState``; a restore needs the same)."""
        return (SERIAL, *((NIC,) if self.netns else ()), *(DISK for _ in self.disks))


@dataclass(frozen=True)
class VmState:
    """What a checkpoint was taken with; a restore needs the same.

    Attributes:
        qemu_version: e.g. ``7.2.22``.
        machine: The resolved machine type, e.g. ``pc-q35-7.2``.
        devices: The device set (``VmConfig.devices``).
        memory_mib: Guest RAM, MiB.
        vcpus: Virtual CPUs.
    """

    qemu_version: str
    machine: str
    devices: tuple[str, ...]
    memory_mib: int
    vcpus: int


def _argv(config: VmConfig, ram: Path, qmp: Path, machine: str, incoming: bool) -> list[str]:
    argv = [
        QEMU, "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-machine", f"{machine},memory-backend=mem", "-accel", config.accelerator,
        "-m", f"{config.memory_mib}M", "-smp", str(config.vcpus),
        "-object", f"memory-backend-file,id=mem,size={config.memory_mib}M,mem-path={ram},share=on",
        "-kernel", str(config.kernel), "-initrd", str(config.initramfs),
        "-append", f"console=ttyS0 panic=-1 quiet {config.cmdline}".strip(),
        "-chardev", f"file,id=console,path={config.console},append=on", "-serial", "chardev:console",
        "-qmp", f"unix:{qmp},server=on,wait=off",
    ]  # fmt: skip
    if config.netns:
        argv = ["ip", "netns", "exec", config.netns, *argv]
        argv += ["-netdev", f"tap,id=net0,ifname={config.tap},script=no,downscript=no",
                 "-device", f"virtio-net-pci,netdev=net0,mac={config.mac}"]  # fmt: skip
    for index, disk in enumerate(config.disks):
        argv += ["-drive", f"file={disk},format=raw,if=none,id=disk{index},cache=writeback",
                 "-device", f"virtio-blk-pci,drive=disk{index}"]  # fmt: skip
    if incoming:
        argv += ["-incoming", "defer"]
    return argv


class Vm:
    """One running QEMU. Build it with ``boot`` or ``restore``; end it with ``checkpoint`` or
    ``stop``.

    Attributes:
        config: Its shape and files.
        workdir: Its directory (QMP socket, RAM file, QEMU's log).
        process: The QEMU process.
        machine: The resolved machine type.
    """

    def __init__(self, config: VmConfig, workdir: Path, process: asyncio.subprocess.Process, machine: str) -> None:
        self.config = config
        self.workdir = workdir
        self.process = process
        self.machine = machine
        self.qmp = QMPClient(f"ate-{workdir.name}")

    @property
    def ram(self) -> Path:
        """The guest's RAM file."""
        return self.workdir / RAM_FILE

    @classmethod
    async def boot(cls, config: VmConfig, workdir: Path) -> Vm:
        """Start a VM that boots ``config.kernel`` fresh.

        Raises:
            VmError: QEMU exited or its monitor did not answer.
        """
        workdir.mkdir(parents=True, exist_ok=True)
        return await cls._start(config, workdir, MACHINE, incoming=False)

    @classmethod
    async def restore(cls, config: VmConfig, workdir: Path, snapshot: Path) -> Vm:
        """Start a VM from checkpoint ``snapshot`` (a dir written by ``checkpoint``) and
        continue its guest where it was; its disks are put at ``config.disks`` as they were.

        Raises:
            VmError: the snapshot was taken by another QEMU, machine or shape (named), or QEMU
                refused its state (e.g. a corrupted file; QEMU's reason included).
        """
        state = read_state(snapshot)
        wanted = VmState(await qemu_version(), state.machine, config.devices, config.memory_mib, config.vcpus)
        if wanted != state:
            raise VmError(f"snapshot {snapshot} was taken with {_shape(state)}; this node would restore it with "
                          f"{_shape(wanted)}")  # fmt: skip
        workdir.mkdir(parents=True, exist_ok=True)
        copy_ram(snapshot / RAM_FILE, workdir / RAM_FILE)
        for index, disk in enumerate(config.disks):  # as they were at the checkpoint
            copy_ram(snapshot / f"disk{index}", disk)
        vm = await cls._start(config, workdir, state.machine, incoming=True)
        try:
            await vm.qmp.execute("migrate-set-capabilities", _IGNORE_SHARED)
            await vm.qmp.execute("migrate-incoming", {"uri": f"exec:cat {_quote(snapshot / STATE_FILE)}"})
            await vm._wait_status({"paused"}, "load the device state")
            await vm.qmp.execute("cont")
        except BaseException:
            await vm.stop()
            raise
        return vm

    @classmethod
    async def _start(cls, config: VmConfig, workdir: Path, machine: str, incoming: bool) -> Vm:
        qmp = workdir / "qmp.sock"
        qmp.unlink(missing_ok=True)
        ram = workdir / RAM_FILE
        if not incoming:
            ram.unlink(missing_ok=True)
        log = (workdir / "qemu.log").open("ab")
        try:
            process = await asyncio.create_subprocess_exec(
                *_argv(config, ram, qmp, machine, incoming), stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        finally:
            log.close()
        vm = cls(config, workdir, process, machine)
        for _ in range(500):
            if process.returncode is not None:
                raise VmError(f"QEMU exited with {process.returncode} at start: {vm.log_tail()}")
            if qmp.exists():
                with contextlib.suppress(OSError, Exception):
                    await vm.qmp.connect(str(qmp))
                    break
            await asyncio.sleep(0.01)
        else:
            await vm.stop()
            raise VmError(f"QEMU's monitor did not answer within 5 s: {vm.log_tail()}")
        if machine == MACHINE:
            vm.machine = await vm._resolved_machine()
        return vm

    async def _resolved_machine(self) -> str:
        machines: Any = await self.qmp.execute("query-machines")
        return next((m["name"] for m in machines if m.get("alias") == MACHINE), MACHINE)

    async def checkpoint(self, snapshot: Path) -> VmState:
        """Save the VM into ``snapshot`` (created): device state, RAM file, a copy of each disk
        (``disk0``...), ``vm.json``; the VM stops and its QEMU exits.

        Raises:
            VmError: QEMU's migration failed (its reason included); the VM is stopped anyway.
        """
        snapshot.mkdir(parents=True, exist_ok=True)
        try:
            await self.qmp.execute("migrate-set-capabilities", _IGNORE_SHARED)
            await self.qmp.execute("stop")
            await self.qmp.execute("migrate", {"uri": f"exec:cat > {_quote(snapshot / STATE_FILE)}"})
            while True:
                info: Any = await self.qmp.execute("query-migrate")
                if info.get("status") == "completed":
                    break
                if info.get("status") in ("failed", "cancelled"):
                    raise VmError(f"QEMU's checkpoint failed: {info.get('error-desc', info.get('status'))}")
                await asyncio.sleep(0.002)
            state = VmState(
                await qemu_version(), self.machine, self.config.devices, self.config.memory_mib, self.config.vcpus
            )
        finally:
            await self.stop()
        shutil.move(str(self.ram), snapshot / RAM_FILE)
        for index, disk in enumerate(self.config.disks):  # the guest's memory holds these very filesystems
            copy_ram(disk, snapshot / f"disk{index}")
        (snapshot / META_FILE).write_text(json.dumps(asdict(state)))
        return state

    async def _wait_status(self, wanted: set[str], what: str) -> None:
        for _ in range(3000):
            if self.process.returncode is not None:
                raise VmError(f"QEMU could not {what} and exited with {self.process.returncode}: {self.log_tail()}")
            with contextlib.suppress(Exception):
                status: Any = await self.qmp.execute("query-status")
                if status.get("status") in wanted:
                    return
            await asyncio.sleep(0.002)
        raise VmError(f"QEMU did not {what} within 6 s: {self.log_tail()}")

    async def stop(self) -> None:
        """End the VM: QMP ``quit``, then SIGKILL when QEMU does not exit within 5 s."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.qmp.execute("quit"), 2)
        with contextlib.suppress(Exception):
            await self.qmp.disconnect()
        if self.process.returncode is None:
            try:
                await asyncio.wait_for(self.process.wait(), 5)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()

    def log_tail(self) -> str:
        """The last lines of QEMU's own output (not the guest's console)."""
        path = self.workdir / "qemu.log"
        try:
            lines = path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no QEMU log)"
        return " | ".join(lines[-3:]) or "(QEMU said nothing)"


_IGNORE_SHARED = {"capabilities": [{"capability": "x-ignore-shared", "state": True}]}


def _quote(path: Path) -> str:
    text = str(path)
    if "'" in text:
        raise VmError(f"path {text!r} has a quote; QEMU's exec: migration URI runs it through a shell")
    return f"'{text}'"


def _shape(state: VmState) -> str:
    return (f"QEMU {state.qemu_version}, machine {state.machine}, devices {','.join(state.devices)}, "
            f"{state.memory_mib} MiB, {state.vcpus} vCPU")  # fmt: skip


def read_state(snapshot: Path) -> VmState:
    """The ``VmState`` recorded in checkpoint ``snapshot``.

    Raises:
        VmError: no readable ``vm.json`` there.
    """
    try:
        data = json.loads((snapshot / META_FILE).read_text())
        return VmState(data["qemu_version"], data["machine"], tuple(data["devices"]), int(data["memory_mib"]),
                       int(data["vcpus"]))  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise VmError(f"snapshot {snapshot} has no readable {META_FILE}: {error}") from None


def copy_ram(source: Path, target: Path) -> None:
    """Copy a RAM file (or a disk image) for a restore: a reflink (copy-on-write, no data copied) where the
    filesystem has them, else a full copy (``cp --reflink=auto``)."""
    done = subprocess.run(["cp", "--reflink=auto", "--sparse=always", str(source), str(target)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise VmError(f"could not copy the RAM file {source}: {done.stderr.strip()}")


_VERSION: str | None = None


async def qemu_version() -> str:
    """The installed QEMU's version (e.g. ``7.2.22``), from ``qemu-system-x86_64 --version``."""
    global _VERSION
    if _VERSION is None:
        process = await asyncio.create_subprocess_exec(QEMU, "--version", stdout=subprocess.PIPE)
        out, _ = await process.communicate()
        words = out.decode().split()
        _VERSION = words[3] if len(words) > 3 and words[:3] == ["QEMU", "emulator", "version"] else "unknown"
    return _VERSION
