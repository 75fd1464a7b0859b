"""The microvm class's VMM back end: one QEMU process per VM, driven over QMP (``qemu.qmp``).

A VM's RAM is a file (``memory-backend-file``, ``share=on``): what the guest writes lands in it,
so a checkpoint only has to save the device state (``migrate`` with ``x-ignore-shared``: the RAM
is left out of the stream) and the RAM file is the memory part of the snapshot. A restore starts
QEMU with the same machine and devices on a copy of that RAM file (a reflink where the
filesystem has them) and ``-incoming defer``, loads the device state and continues the guest.
MICROVM.md has the measurements this follows (TCG here: nested KVM does not run guests).

This module is ``Vm``: the conversation with one running QEMU over its monitor (boot, restore,
checkpoint, pause, continue, readdress, adopt, stop). Its parts live beside it:

- ``vm_config``: ``VmConfig`` (a VM's shape and files), the device kinds, ``VmError``;
- ``qemu_process``: QEMU's command line, the installed QEMU's version and machine type, and
  ``AdoptedProcess`` (a QEMU a previous atelet started);
- ``vm_snapshot``: a checkpoint's files and ``VmState`` (what it was taken with; a restore needs
  the same), and ``copy_ram``.

The names of those modules that callers used from here are re-exported.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from qemu.qmp import QMPClient, QMPError

from atelet.drivers.microvm.qemu_process import QEMU, AdoptedProcess, command_line, qemu_version, resolved_machine
from atelet.drivers.microvm.vm_config import (
    AGENT_SOCKET,
    DEVICE_KINDS,
    LOG_FILE,
    MACHINE,
    PID_FILE,
    QMP_SOCKET,
    RAM_FILE,
    VmConfig,
    VmError,
)
from atelet.drivers.microvm.vm_snapshot import (
    META_FILE,
    STATE_FILE,
    VmState,
    copy_ram,
    describe,
    fsync_file,
    read_state,
    write_state,
)
from domain.failpoints import failpoint

__all__ = [
    "DEVICE_KINDS", "MACHINE", "META_FILE", "PID_FILE", "QEMU", "RAM_FILE", "STATE_FILE", "AdoptedProcess",
    "Vm", "VmConfig", "VmError", "VmState", "copy_ram", "qemu_version", "read_state", "resolved_machine",
]  # fmt: skip

EXEC_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/.ate/bin"
"""The PATH of an exec in the guest: a Debian system's, then busybox's applets (a minimal image
has no shell tools of its own)."""

MIGRATE_POLLS = 30000
"""How many times (every 2 ms: a minute) a checkpoint asks QEMU whether its migration completed."""


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
        self._agent = asyncio.Lock()  # the guest's channel takes one client at a time
        self._unanswered = False
        """A request went to the guest and its answer was not read (a call timed out or was
        cancelled): that answer may still come, so the next request resynchronises first."""

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
            raise VmError(f"snapshot {snapshot} was taken with {describe(state)}; this node would restore it with "
                          f"{describe(wanted)}")  # fmt: skip
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
        qmp = workdir / QMP_SOCKET
        qmp.unlink(missing_ok=True)
        ram = workdir / RAM_FILE
        if not incoming:
            ram.unlink(missing_ok=True)
        log = (workdir / LOG_FILE).open("ab")
        try:
            # its own session: a Ctrl-C to the atelet's terminal must not end the VMs it then checkpoints
            process = await asyncio.create_subprocess_exec(
                *command_line(config, ram, qmp, machine, incoming), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
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
            await asyncio.to_thread(fsync_file, snapshot / RAM_FILE)
        else:
            await asyncio.to_thread(shutil.move, str(self.ram), snapshot / RAM_FILE)
        for index, disk in enumerate(self.config.disks):  # the guest's memory holds these very filesystems
            await asyncio.to_thread(copy_ram, disk, snapshot / f"disk{index}")
        write_state(snapshot, state)  # last: a snapshot with vm.json is complete
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

    async def agent(self, request: str, timeout: float = 30.0) -> str:
        """One request line to ate's init in the guest over its channel (init.sh lists them) and
        its one-line answer, one request at a time.

        Raises:
            VmError: no answer within ``timeout`` s, or the channel cannot be reached.
        """
        try:
            async with self._agent, asyncio.timeout(timeout):
                reader, writer = await asyncio.open_unix_connection(self.workdir / AGENT_SOCKET, limit=1 << 24)
                try:
                    if self._unanswered:
                        await self._resync(reader, writer)
                    self._unanswered = True
                    writer.write(f"{request}\n".encode())
                    await writer.drain()
                    answer = (await reader.readline()).decode(errors="replace").strip()
                    self._unanswered = False
                    return answer
                finally:
                    writer.close()
        except (OSError, TimeoutError, ValueError) as error:
            raise VmError(f"no answer from the guest: {error or 'timed out'}") from error

    async def _resync(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read past the answers of earlier requests nobody read: send a request no init knows,
        ``sync <nonce>``, and discard lines up to its echo (``failed: sync <nonce>``; every init
        echoes an unknown request, and answers its requests in order)."""
        nonce = uuid.uuid4().hex
        writer.write(f"sync {nonce}\n".encode())
        await writer.drain()
        while True:
            line = await reader.readline()
            if not line:
                raise OSError("the guest's channel closed")
            if line.decode(errors="replace").strip() == f"failed: sync {nonce}":
                break
        self._unanswered = False

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
            answer = await self.agent(f"addr {address} {gateway}", timeout)
        except VmError as error:
            raise VmError(f"the guest did not take address {address}: {error}") from error
        if answer != "ok":
            raise VmError(f"the guest did not take address {address}: it answered {answer!r}")

    async def set_clock(self, timeout: float = 10.0) -> bool:
        """Sets the guest's wall clock to this host's (to the second): a guest restored or let
        run again after a stop comes back with the time it was saved or stopped at. False when
        its init predates the request (a VM booted by an older atelet: its clock stays behind).

        Raises:
            VmError: the guest did not answer, or refused.
        """
        request = f"clock {round(time.time())}"
        answer = await self.agent(request, timeout)
        if answer == "ok":
            return True
        if _unknown_to_init(request, answer):
            return False
        raise VmError(f"the guest did not set its clock: it answered {answer!r}")

    async def exec(self, command: Sequence[str], max_output_bytes: int, poll_seconds: float = 0.2) -> tuple[int, bytes, bytes]:
        """Runs ``command`` in the guest next to its workload (as root, in ``/``, with the PATH
        of a Debian system and busybox's applets after it) until it ends: (its exit status, the
        first ``max_output_bytes`` of its stdout and of its stderr). Cancelling the call kills
        its session in the guest.

        Raises:
            VmError: the guest did not start it or stopped answering about it.
        """
        script = ("cd / && exec /.ate/bin/env -i PATH=" + shlex.quote(EXEC_PATH) + " HOME=/root "
                  + " ".join(shlex.quote(word) for word in command) + "\n")  # fmt: skip
        run = uuid.uuid4().hex[:16]
        request = f"exec {run} {base64.b64encode(script.encode()).decode()}"
        answer = await self.agent(request)
        if _unknown_to_init(request, answer):
            raise VmError("this VM's init has no exec: the VM was booted by an atelet older than exec, and its "
                          "snapshots keep that init; an actor booted from a template created since has it")  # fmt: skip
        if answer != "started":
            raise VmError(f"the guest did not start the command: it answered {answer!r}")
        try:
            while True:
                answer = await self.agent(f"status {run} {max_output_bytes}")
                if answer != "running":
                    break
                await asyncio.sleep(poll_seconds)
        except BaseException:
            with contextlib.suppress(VmError):
                await asyncio.shield(self.agent(f"kill {run}", 10))
            raise
        words = answer.split(" ")
        if len(words) != 4 or words[0] != "done" or not words[1].isdigit():
            raise VmError(f"the guest answered {answer[:200]!r} about the command")
        out, err = (b"" if w == "-" else base64.b64decode(w) for w in words[2:])
        return int(words[1]), out, err

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
        vm._unanswered = True  # the previous atelet may have left an answer unread
        try:
            await asyncio.wait_for(vm.qmp.connect(str(workdir / QMP_SOCKET)), 5)
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
        path = self.workdir / LOG_FILE
        try:
            lines = path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no QEMU log)"
        return " | ".join(lines[-3:]) or "(QEMU said nothing)"


_IGNORE_SHARED = {"capabilities": [{"capability": "x-ignore-shared", "state": True}]}


def _unknown_to_init(request: str, answer: str) -> bool:
    """Whether ``answer`` is how an init from before ``request``'s verb answers it: it echoes
    any request it does not know (``failed: <the request>``; the agent strips the trailing
    space of a request with fewer words)."""
    return answer == f"failed: {request}".strip()


def _quote(path: Path) -> str:
    text = str(path)
    if "'" in text:
        raise VmError(f"path {text!r} has a quote; QEMU's exec: migration URI runs it through a shell")
    return f"'{text}'"
