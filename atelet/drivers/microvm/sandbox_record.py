"""What the microvm driver keeps per VM: ``SandboxRecord``, saved as ``sandbox.json`` in the VM's
dir (what a restarted atelet adopts it by, and what the read-back of its disks needs), with the
running ``Vm`` held in memory only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atelet.drivers.microvm.qemu import Vm
from atelet.drivers.microvm.vm_config import PID_FILE, VmConfig

RECORD_FILE = "sandbox.json"


@dataclass
class SandboxRecord:
    """One VM as the driver holds it (``sandbox.json`` on disk; ``vm`` in memory only).

    Attributes:
        workdir: The VM's dir, ``<driver root>/<container id>/``.
        config: The VM's shape and files.
        volumes: The durable dirs, one per disk of ``config.disks``, in order.
        address: ``<ip>/<prefix length> <gateway>``: the worker's address the guest must have.
        pid: QEMU's pid (0 before it started).
        machine: The resolved machine type it runs.
        vm: The running VM (None until launched or adopted).
    """

    workdir: Path
    config: VmConfig
    volumes: list[Path]
    address: str
    pid: int = 0
    machine: str = ""
    vm: Vm | None = None
    addressed: bool = False
    """The guest has ``address`` (booted with it, or told it after a restore)."""
    read_back: bool = False
    """The disks were read back into the durable dirs after the VM ended for good."""
    saved_running: bool = False
    """A checkpoint bound for object storage saved the VM and left it (stopped): whether that
    snapshot got stored is the node's to know, so a restarted atelet must not continue it."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def document(self) -> dict[str, Any]:
        """The record as ``sandbox.json`` holds it (JSON-ready)."""
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
    def load(cls, workdir: Path) -> SandboxRecord:
        """The record saved in ``workdir`` (no ``vm``).

        Raises:
            OSError, ValueError, KeyError: no readable ``sandbox.json`` there.
        """
        data = json.loads((workdir / RECORD_FILE).read_text())
        c = data["config"]
        config = VmConfig(Path(c["kernel"]), Path(c["initramfs"]), int(c["memory_mib"]), int(c["vcpus"]),
                          c["accelerator"], Path(c["console"]), c["cmdline"], c["netns"], c["tap"], c["mac"],
                          tuple(Path(d) for d in c["disks"]))  # fmt: skip
        return cls(workdir, config, [Path(v) for v in data["volumes"]], data["address"], int(data["pid"]),
                   data["machine"], addressed=bool(data.get("addressed")), read_back=bool(data.get("read_back")),
                   saved_running=bool(data.get("saved_running")))  # fmt: skip

    def save(self) -> None:
        """Write ``sandbox.json`` atomically (nothing when the dir was removed meanwhile)."""
        if not self.workdir.is_dir():  # removed by delete meanwhile: nothing left to record
            return
        tmp = self.workdir / f".{RECORD_FILE}.tmp"
        tmp.write_text(json.dumps(self.document()))
        tmp.replace(self.workdir / RECORD_FILE)


def qemu_pid(workdir: Path) -> int:
    """The pid QEMU wrote into ``workdir`` (0 when none)."""
    with contextlib.suppress(OSError, ValueError):
        return int((workdir / PID_FILE).read_text().strip())
    return 0
