"""The QEMU process of a microvm VM, apart from its monitor: the command line a VM is started
with (``command_line``), what the installed QEMU says of itself (``qemu_version``,
``resolved_machine``), and a handle on a QEMU a previous atelet started (``AdoptedProcess``).

What is said to a running QEMU over QMP is ``qemu.Vm``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import subprocess
from pathlib import Path

from atelet.drivers.microvm.vm_config import AGENT_SOCKET, MACHINE, PID_FILE, VmConfig, VmError

QEMU = "qemu-system-x86_64"


def command_line(config: VmConfig, ram: Path, qmp: Path, machine: str, incoming: bool) -> list[str]:
    """QEMU's argv for a VM of ``config`` (run in ``config.netns`` when it has one).

    Args:
        config: The VM's shape and files.
        ram: Its RAM file (``memory-backend-file``, shared: the guest's writes land in it).
        qmp: The monitor's socket; QEMU writes its pid next to it (``PID_FILE``) and listens for
            the agent channel there too (``AGENT_SOCKET``).
        machine: The machine type (``MACHINE`` to boot; a restore gives the recorded one).
        incoming: Wait for a device state (``-incoming defer``: a restore) instead of booting.

    Raises:
        VmError: a path has a comma, which QEMU's options cannot take.
    """
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


async def resolved_machine() -> str:
    """The versioned machine type ``MACHINE`` is an alias of here, e.g. ``pc-q35-7.2`` (from
    ``qemu-system-x86_64 -machine help``; a VM started with the alias reports the same).

    Raises:
        VmError: QEMU names no such machine.
    """
    process = await asyncio.create_subprocess_exec(QEMU, "-machine", "help", stdout=subprocess.PIPE)
    out, _ = await process.communicate()
    for line in out.decode(errors="replace").splitlines():
        words = line.split()
        if words and words[0] == MACHINE and "(alias of " in line:
            return line.rsplit("(alias of ", 1)[1].rstrip(")").strip()
    raise VmError(f"{QEMU} -machine help names no machine {MACHINE!r}")


async def qemu_version() -> str:
    """The installed QEMU's version with its package, e.g. ``7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)``
    (from ``qemu-system-x86_64 --version``; the running QEMU says the same through QMP).

    Raises:
        VmError: QEMU printed no version line.
    """
    process = await asyncio.create_subprocess_exec(QEMU, "--version", stdout=subprocess.PIPE)
    out, _ = await process.communicate()
    first = out.decode(errors="replace").splitlines()[0] if out else ""
    prefix = "QEMU emulator version "
    if not first.startswith(prefix):
        raise VmError(f"cannot tell the version of {QEMU}: it printed {first!r}")
    return first[len(prefix):].strip()
