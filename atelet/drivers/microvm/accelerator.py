"""Which accelerator the microvm class's VMs run under: ``kvm`` where it really runs guests,
else ``tcg`` (QEMU's software emulation: slow, but real).

``/dev/kvm`` being there is not enough: on machines that are themselves VMs without nested
virtualisation, ``KVM_CREATE_VM`` succeeds and the guest never gets past the kernel's entry
(MICROVM.md, "KVM"). So ``choose`` boots the guest kernel under KVM for a moment and keeps KVM
only when the kernel prints its first line within ``PROBE_SECONDS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
from pathlib import Path

from atelet.drivers.microvm.qemu_process import QEMU

log = logging.getLogger(__name__)

ACCELERATORS = ("auto", "kvm", "tcg")
PROBE_SECONDS = 5.0
"""How long the KVM probe waits for the kernel's first line (a working KVM prints it in ms)."""


async def kvm_runs_guests(kernel: Path, seconds: float = PROBE_SECONDS) -> bool:
    """Whether a guest kernel under ``-accel kvm`` prints ``Linux version`` within ``seconds``."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    argv = [QEMU, "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-accel", "kvm",
            "-machine", "q35", "-m", "128M", "-kernel", str(kernel), "-append", "console=ttyS0 panic=-1",
            "-serial", "stdio"]  # fmt: skip
    process = await asyncio.create_subprocess_exec(*argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                                   stderr=subprocess.DEVNULL)  # fmt: skip
    assert process.stdout is not None
    seen = b""
    try:
        async with asyncio.timeout(seconds):
            while b"Linux version" not in seen:
                piece = await process.stdout.read(4096)
                if not piece:
                    return False
                seen = (seen + piece)[-8192:]
        return True
    except TimeoutError:
        return False
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


async def choose(setting: str, kernel: Path) -> str:
    """The accelerator for ``setting`` (one of ``ACCELERATORS``): ``auto`` probes KVM and logs
    which one runs and why.

    Raises:
        ValueError: ``setting`` is not one of ``ACCELERATORS``.
    """
    if setting not in ACCELERATORS:
        raise ValueError(f"microvm accelerator must be one of {', '.join(ACCELERATORS)}, got {setting!r}")
    if setting != "auto":
        return setting
    if await kvm_runs_guests(kernel):
        log.info("microvm: KVM runs guests here; VMs run with -accel kvm")
        return "kvm"
    log.warning("microvm: KVM does not run guests here (no usable /dev/kvm, or nested virtualisation missing): "
                "VMs run under TCG, QEMU's software emulation, many times slower")  # fmt: skip
    return "tcg"
