"""How the node learns that a microvm sandbox ended on its own: ``VmExitWatch`` waits for the
VM's QEMU to exit, reads its disks back into the durable dirs, and says why it ended (QEMU's
exit status and what ate's init said last on the guest's console).
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

from atelet.drivers.microvm.disk_read_back import read_back
from atelet.drivers.microvm.qemu_process import AdoptedProcess
from atelet.drivers.microvm.sandbox_record import SandboxRecord
from atelet.errors import AteletError


class VmExitWatch:
    """Watches one VM's QEMU for its exit (``ExitWatch``).

    Args:
        sandbox: The watched sandbox; it has a running ``vm``.
    """

    def __init__(self, sandbox: SandboxRecord) -> None:
        self.sandbox = sandbox

    async def gone(self) -> None:
        """Returns once QEMU exited (the guest powered off, or QEMU died); the disks are then
        read back into the durable dirs."""
        assert self.sandbox.vm is not None
        await self.sandbox.vm.process.wait()
        with contextlib.suppress(AteletError):
            await read_back(self.sandbox, final=True)

    async def reason(self, log_path: Path) -> str:
        """``the VM stopped (QEMU exit status N); last log line: ...`` (the guest's console, where
        ate's init says how the workload ended)."""
        assert self.sandbox.vm is not None
        code = self.sandbox.vm.process.returncode
        if code == -1 and isinstance(self.sandbox.vm.process, AdoptedProcess):
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
