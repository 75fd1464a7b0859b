"""What a microvm VM is made of: its shape and files (``VmConfig``), the kinds of device it may
have, the names of the files in its workdir, and the error every part of the QEMU back end raises
(``VmError``).

The rest of the back end builds on these: ``qemu_process`` starts QEMU for a ``VmConfig``,
``vm_snapshot`` records a checkpoint's shape (``VmState``), ``qemu`` drives a running VM.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MACHINE = "q35"
"""The machine type asked for (an alias QEMU resolves to its versioned type, e.g. pc-q35-7.2)."""
SERIAL = "serial:chardev-file"
NIC = "virtio-net-pci"
AGENT = "virtserialport:ate.agent"
"""The channel to ate's init in the guest (``readdress``), with the network card."""
DISK = "virtio-blk-pci"
DEVICE_KINDS = (SERIAL, NIC, AGENT, DISK)
"""Every kind of device a VM of this build may have (in a snapshot's runtime version)."""
RAM_FILE = "ram"
"""The guest's RAM file, in the VM's workdir and in a checkpoint."""
PID_FILE = "qemu.pid"
"""QEMU's own record of its pid (in the VM's workdir), written as it starts: an atelet killed
before it learned the pid still leaves a way to find the process."""
AGENT_SOCKET = "agent.sock"
"""The host end of the channel to ate's init (in the VM's workdir)."""
QMP_SOCKET = "qmp.sock"
"""QEMU's monitor socket (in the VM's workdir)."""
LOG_FILE = "qemu.log"
"""QEMU's own output (in the VM's workdir; the guest's console is ``VmConfig.console``)."""


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
