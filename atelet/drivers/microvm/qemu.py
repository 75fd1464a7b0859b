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
import os
import select
import shutil
import signal
import subprocess
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from qemu.qmp import QMPClient, QMPError

from domain.failpoints import failpoint

QEMU = "qemu-system-x86_64"
MACHINE = "q35"
"""The machine type asked for (an alias QEMU resolves to its versioned type, e.g. pc-q35-7.2)."""
SERIAL = "serial:chardev-file"
NIC = "virtio-net-pci"
AGENT = "virtserialport:ate.agent"
"""The channel to ate's init in the guest (``readdress``), with the network card."""
DISK = "virtio-blk-pci"
DEVICE_KINDS = (SERIAL, NIC, AGENT, DISK)
"""Every kind of device a VM of this build may have (in a snapshot's runtime version)."""
STATE_FILE = "state"
"""The device-state file of a checkpoint (next to ``RAM_FILE`` and ``META_FILE``)."""
RAM_FILE = "ram"
META_FILE = "vm.json"
PID_FILE = "qemu.pid"
"""QEMU's own record of its pid (in the VM's workdir), written as it starts: an atelet killed
before it learned the pid still leaves a way to find the process."""
AGENT_SOCKET = "agent.sock"
"""The host end of the channel to ate's init (in the VM's workdir)."""
MIGRATE_POLLS = 30000
"""How many times (every 2 ms: a minute) a checkpoint asks QEMU whether its migration completed."""


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
        return (SERIAL, *((NIC, AGENT) if self.netns else ()), *(DISK for _ in self.disks))


@dataclass(frozen=True)
class VmState:
    """What a checkpoint was taken with; a restore needs the same.

    Attributes:
        qemu_version: e.g. ``7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)``.
        machine: The resolved machine type, e.g. ``pc-q35-7.2``.
        accelerator: ``kvm`` or ``tcg`` (a state moves between equal ones only).
        devices: The device set (``VmConfig.devices``).
        memory_mib: Guest RAM, MiB.
        vcpus: Virtual CPUs.
        mac: The network card's MAC (kept by a restore; "" without a card).
    """

    qemu_version: str
    machine: str
    accelerator: str
    devices: tuple[str, ...]
    memory_mib: int
    vcpus: int
    mac: str = ""


def _argv(config: VmConfig, ram: Path, qmp: Path, machine: str, incoming: bool) -> list[str]:
    for path in (ram, qmp, config.console, config.kernel, config.initramfs, *config.disks):
        if "," in str(path):
            raise VmError(f"path {path} has a comma, which QEMU's options cannot take")
    argv = [
        QEMU, "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-machine", f"{machine},memory-backend=mem", "-accel", config.accelerator,
        "-m", f"{config.memory_mib}M", "-smp", str(config.vcpus),
        "-object", f"memory-backend-file,id=mem,size={config.memory_mib}M,mem-path={ram},share=on",
        "-kernel", str(config.kernel), "-initrd", str(config.initramfs),
        "-append", f"console=ttyS0 panic=-1 quiet {config.cmdline}".strip(),
        "-chardev", f"file,id=console,path={config.console},append=on", "-serial", "chardev:console",
        "-qmp", f"unix:{qmp},server=on,wait=off", "-pidfile", str(qmp.parent / PID_FILE),
    ]  # fmt: skip
    if config.netns:
        argv = ["ip", "netns", "exec", config.netns, *argv]
        argv += ["-netdev", f"tap,id=net0,ifname={config.tap},script=no,downscript=no",
                 "-device", f"virtio-net-pci,netdev=net0,mac={config.mac}",
                 "-device", "virtio-serial-pci,id=serial0",
                 "-chardev", f"socket,id=agent,path={qmp.parent / AGENT_SOCKET},server=on,wait=off",
                 "-device", "virtserialport,chardev=agent,name=ate.agent"]  # fmt: skip
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
        wanted = VmState(await qemu_version(), state.machine, config.accelerator, config.devices, config.memory_mib,
                         config.vcpus, state.mac)  # fmt: skip
        config = replace(config, mac=state.mac)  # the card keeps its MAC (readdress gives the new IP)
        if wanted != state:
            raise VmError(f"snapshot {snapshot} was taken with {_shape(state)}; this node would restore it with "
                          f"{_shape(wanted)}")  # fmt: skip
        workdir.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(copy_ram, snapshot / RAM_FILE, workdir / RAM_FILE)
        for index, disk in enumerate(config.disks):  # as they were at the checkpoint
            await asyncio.to_thread(copy_ram, snapshot / f"disk{index}", disk)
        vm = await cls._start(config, workdir, state.machine, incoming=True)
        try:
            running = await vm._running_version()
            if running != state.qemu_version:  # the binary changed since the check above
                raise VmError(f"snapshot {snapshot} was taken with QEMU {state.qemu_version}; this QEMU is {running}")
            await vm.qmp.execute("migrate-set-capabilities", _IGNORE_SHARED)
            await vm.qmp.execute("migrate-incoming", {"uri": f"exec:cat {_quote(snapshot / STATE_FILE)}"})
            await vm._wait_status({"paused"}, "load the device state")
            await failpoint("Microvm.restore.after_load")  # the kill matrix's cell: loaded, not yet running
            await vm.qmp.execute("cont")
        except QMPError as error:
            await vm.stop()
            raise VmError(f"QEMU refused the restore of {snapshot}: {error}; {vm.log_tail()}") from error
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
            # its own session: a Ctrl-C to the atelet's terminal must not end the VMs it then checkpoints
            process = await asyncio.create_subprocess_exec(
                *_argv(config, ram, qmp, machine, incoming), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True,
            )
        finally:
            log.close()
        vm = cls(config, workdir, process, machine)
        try:
            for _ in range(500):
                if process.returncode is not None:
                    raise VmError(f"QEMU exited with {process.returncode} at start: {vm.log_tail()}")
                if qmp.exists():
                    with contextlib.suppress(OSError, QMPError, TimeoutError):
                        await asyncio.wait_for(vm.qmp.connect(str(qmp)), 2)
                        break
                await asyncio.sleep(0.01)
            else:
                raise VmError(f"QEMU's monitor did not answer within 5 s: {vm.log_tail()}")
            if machine == MACHINE:
                vm.machine = await vm._resolved_machine()
        except BaseException:
            await vm.stop()
            raise
        return vm

    async def _resolved_machine(self) -> str:
        machines: Any = await self.qmp.execute("query-machines")
        return next((m["name"] for m in machines if m.get("alias") == MACHINE), MACHINE)

    async def checkpoint(self, snapshot: Path, *, leave_running: bool = False) -> VmState:
        """Save the VM into ``snapshot`` (created): device state, RAM file, a copy of each disk
        (``disk0``...), ``vm.json``; the VM stops and its QEMU exits. With ``leave_running`` the
        VM stays as it was, stopped (``cont`` lets it run on; ``stop`` ends it), and its RAM
        file is copied (a reflink where the filesystem has them) instead of moved.

        Raises:
            VmError: QEMU's migration failed (its reason included); the VM is stopped anyway
                (left as it was with ``leave_running``).
        """
        snapshot.mkdir(parents=True, exist_ok=True)
        state_fd = os.open(snapshot / STATE_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            try:
                await self.qmp.execute("migrate-set-capabilities", _IGNORE_SHARED)
                await self.qmp.execute("stop")
                # QEMU writes the device state into our own file descriptor: once it says
                # completed, every byte is in the file (an exec: pipe could still be draining).
                self.qmp.send_fd_scm(state_fd)
                await self.qmp.execute("getfd", {"fdname": "ate-state"})
                await self.qmp.execute("migrate", {"uri": "fd:ate-state"})
                for _ in range(MIGRATE_POLLS):
                    info: Any = await self.qmp.execute("query-migrate")
                    if info.get("status") == "completed":
                        break
                    if info.get("status") in ("failed", "cancelled"):
                        raise VmError(f"QEMU's checkpoint failed: {info.get('error-desc', info.get('status'))}")
                    await asyncio.sleep(0.002)
                else:
                    raise VmError(f"QEMU's checkpoint did not complete within {MIGRATE_POLLS * 0.002:g} s")
                state = VmState(await self._running_version(), self.machine, self.config.accelerator,
                                self.config.devices, self.config.memory_mib, self.config.vcpus,
                                self.config.mac)  # fmt: skip
                await failpoint("Microvm.checkpoint.after_save")  # the kill matrix's cell: saved, still there
            except QMPError as error:
                raise VmError(f"QEMU refused the checkpoint: {error}") from error
            except BaseException:
                if leave_running:  # a migration still running would stop the guest once it completes
                    with contextlib.suppress(Exception):
                        await self.qmp.execute("migrate_cancel")
                raise
            finally:
                if not leave_running:
                    await self.stop()
            await asyncio.to_thread(os.fsync, state_fd)
        finally:
            os.close(state_fd)
        if leave_running:
            await asyncio.to_thread(copy_ram, self.ram, snapshot / RAM_FILE)
            await asyncio.to_thread(_fsync, snapshot / RAM_FILE)
        else:
            await asyncio.to_thread(shutil.move, str(self.ram), snapshot / RAM_FILE)
        for index, disk in enumerate(self.config.disks):  # the guest's memory holds these very filesystems
            await asyncio.to_thread(copy_ram, disk, snapshot / f"disk{index}")
        meta = snapshot / f".{META_FILE}.tmp"
        meta.write_text(json.dumps(asdict(state)))
        meta.rename(snapshot / META_FILE)  # last: a snapshot with vm.json is complete
        return state

    async def _running_version(self) -> str:
        """The running QEMU's version, as ``qemu_version`` gives it."""
        found: Any = await self.qmp.execute("query-version")
        number = "{major}.{minor}.{micro}".format(**found["qemu"])
        package = str(found.get("package", "")).strip().strip("()")
        return f"{number} ({package})" if package else number

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

    async def readdress(self, address: str, gateway: str, timeout: float = 30.0) -> None:
        """Give the guest's eth0 a new address and default route (a VM restored on another
        worker comes back with the one it had): ate's init applies it and answers ``ok``.

        Args:
            address: ``<ip>/<prefix length>``, e.g. ``10.89.0.6/30``.
            gateway: The worker's host end, e.g. ``10.89.0.5``.

        Raises:
            VmError: the guest did not answer ``ok`` within ``timeout`` s (its answer named).
        """
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_unix_connection(self.workdir / AGENT_SOCKET)
                try:
                    writer.write(f"addr {address} {gateway}\n".encode())
                    await writer.drain()
                    answer = (await reader.readline()).decode(errors="replace").strip()
                finally:
                    writer.close()
        except (OSError, TimeoutError) as error:
            raise VmError(f"the guest did not take address {address}: {error or 'no answer'}") from error
        if answer != "ok":
            raise VmError(f"the guest did not take address {address}: it answered {answer!r}")

    async def pause(self) -> None:
        """Stop the guest's vCPUs (its state stays in QEMU; ``cont`` continues it).

        Raises:
            VmError: QEMU refused (its reason included).
        """
        try:
            await self.qmp.execute("stop")
        except QMPError as error:
            raise VmError(f"QEMU did not stop the guest: {error}") from error

    async def cont(self) -> None:
        """Let a stopped guest run again (also after a checkpoint with ``leave_running``).

        Raises:
            VmError: QEMU refused (its reason included).
        """
        try:
            await self.qmp.execute("cont")
        except QMPError as error:
            raise VmError(f"QEMU did not continue the guest: {error}") from error

    @classmethod
    async def attach(cls, config: VmConfig, workdir: Path, pid: int, machine: str) -> Vm:
        """Take over the QEMU ``pid`` that a previous atelet process started in ``workdir``.

        Raises:
            VmError: the process is gone or is not that VM's QEMU, or its monitor does not answer.
        """
        try:
            process = AdoptedProcess(pid)  # before the checks: the pid cannot change hands after this
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            raise VmError(f"QEMU process {pid} is gone") from None
        if os.fsencode(str(workdir / RAM_FILE)) not in b",".join(cmdline) or not any(b"qemu" in w for w in cmdline[:8]):
            raise VmError(f"process {pid} is not the QEMU of {workdir}")
        vm = cls(config, workdir, process, machine)  # type: ignore[arg-type]
        try:
            await asyncio.wait_for(vm.qmp.connect(str(workdir / "qmp.sock")), 5)
        except (OSError, QMPError, TimeoutError) as error:
            raise VmError(f"the monitor of QEMU process {pid} does not answer: {error}") from error
        return vm

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
    return (f"QEMU {state.qemu_version}, machine {state.machine}, accelerator {state.accelerator}, devices "
            f"{','.join(state.devices)}, {state.memory_mib} MiB, {state.vcpus} vCPU")  # fmt: skip


def read_state(snapshot: Path) -> VmState:
    """The ``VmState`` recorded in checkpoint ``snapshot``.

    Raises:
        VmError: no readable ``vm.json`` there.
    """
    try:
        data = json.loads((snapshot / META_FILE).read_text())
        return VmState(data["qemu_version"], data["machine"], data["accelerator"], tuple(data["devices"]),
                       int(data["memory_mib"]), int(data["vcpus"]), str(data.get("mac", "")))  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise VmError(f"snapshot {snapshot} has no readable {META_FILE}: {error}") from None


class AdoptedProcess:
    """The parts of ``asyncio.subprocess.Process`` a ``Vm`` uses, for a QEMU this process did not
    start (a previous atelet's). It holds a pidfd of the process from the start, so a pid the
    kernel hands to another process once QEMU is gone is never mistaken for it (never waited
    for, never killed); its exit status is unknown (-1: whoever reaps it gets it).

    Raises:
        ProcessLookupError: no process ``pid`` (it is gone already).
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._pidfd = os.pidfd_open(pid)
        self._exited = False

    @property
    def returncode(self) -> int | None:
        """None while the process lives, else -1."""
        if not self._exited:
            poller = select.poll()
            poller.register(self._pidfd, select.POLLIN)
            self._exited = bool(poller.poll(0))  # a pidfd is readable once its process exited
            if self._exited:
                os.close(self._pidfd)
        return -1 if self._exited else None

    async def wait(self) -> int:
        """Returns once the process exited (polled every 50 ms)."""
        while self.returncode is None:
            await asyncio.sleep(0.05)
        return -1

    def kill(self) -> None:
        """SIGKILL (through the pidfd: to this very process or none)."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def copy_ram(source: Path, target: Path) -> None:
    """Copy a RAM file (or a disk image) for a restore: a reflink (copy-on-write, no data copied) where the
    filesystem has them, else a full copy (``cp --reflink=auto``)."""
    done = subprocess.run(["cp", "--reflink=auto", "--sparse=always", str(source), str(target)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise VmError(f"could not copy {source} to {target}: {done.stderr.strip()}")


async def resolved_machine() -> str:
    """The versioned machine type ``MACHINE`` is an alias of here, e.g. ``pc-q35-7.2`` (from
    ``qemu-system-x86_64 -machine help``; a VM started with the alias reports the same)."""
    process = await asyncio.create_subprocess_exec(QEMU, "-machine", "help", stdout=subprocess.PIPE)
    out, _ = await process.communicate()
    for line in out.decode(errors="replace").splitlines():
        words = line.split()
        if words and words[0] == MACHINE and "(alias of " in line:
            return line.rsplit("(alias of ", 1)[1].rstrip(")").strip()
    raise VmError(f"{QEMU} -machine help names no machine {MACHINE!r}")


async def qemu_version() -> str:
    """The installed QEMU's version with its package, e.g. ``7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)``
    (from ``qemu-system-x86_64 --version``; the running QEMU says the same through QMP)."""
    process = await asyncio.create_subprocess_exec(QEMU, "--version", stdout=subprocess.PIPE)
    out, _ = await process.communicate()
    first = out.decode(errors="replace").splitlines()[0] if out else ""
    prefix = "QEMU emulator version "
    if not first.startswith(prefix):
        raise VmError(f"cannot tell the version of {QEMU}: it printed {first!r}")
    return first[len(prefix):].strip()
