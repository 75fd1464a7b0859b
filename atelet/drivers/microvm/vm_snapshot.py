"""The files of a microvm checkpoint and what it records.

A checkpoint is a dir: the device state (``STATE_FILE``, QEMU's migration stream without the
RAM), the RAM file (``RAM_FILE``), a copy of each disk (``disk0``...), and last ``vm.json``
(``META_FILE``: a ``VmState``, what a restore needs to match; QEMU's migration format holds only
between equal ones). A checkpoint with ``vm.json`` is complete.

RAM files and disk images are copied with ``copy_ram``: a reflink where the filesystem has them.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from atelet.drivers.microvm.vm_config import VmError

STATE_FILE = "state"
"""The device-state file of a checkpoint (next to ``RAM_FILE`` and ``META_FILE``)."""
META_FILE = "vm.json"


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


def describe(state: VmState) -> str:
    """``QEMU <version>, machine <type>, accelerator <a>, devices <kinds>, <n> MiB, <n> vCPU``
    (for the message of a restore that does not match)."""
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


def write_state(snapshot: Path, state: VmState) -> None:
    """Record ``state`` as checkpoint ``snapshot``'s ``vm.json``, atomically: written last, it
    marks the checkpoint complete.

    Raises:
        OSError: it could not be written.
    """
    meta = snapshot / f".{META_FILE}.tmp"
    meta.write_text(json.dumps(asdict(state)))
    meta.rename(snapshot / META_FILE)


def fsync_file(path: Path) -> None:
    """Flush ``path``'s data to its disk.

    Raises:
        OSError: it cannot be opened or flushed.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def copy_ram(source: Path, target: Path) -> None:
    """Copy a RAM file (or a disk image) for a restore: a reflink (copy-on-write, no data copied) where the
    filesystem has them, else a full copy (``cp --reflink=auto``).

    Raises:
        VmError: ``cp`` failed (its message included).
    """
    done = subprocess.run(["cp", "--reflink=auto", "--sparse=always", str(source), str(target)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise VmError(f"could not copy {source} to {target}: {done.stderr.strip()}")
