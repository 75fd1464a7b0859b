"""The prepare step of a microvm sandbox: from the workload spec to what its VM starts with.

``prepare_guest`` unpacks the container's image, writes the guest's initramfs (the image as its
root filesystem, the command, the kernel modules it needs and ate's init; built once per content
and cached), one ext4 disk per durable dir, and ``plan.json`` (``PLAN_FILE``: initramfs, memory,
vCPUs, kernel command line, disks and their durable dirs), which ``launch`` reads.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import tempfile
from pathlib import Path

from atelet.bundle import build_config
from atelet.drivers.microvm import disk, network
from atelet.drivers.microvm.initramfs import (
    INIT,
    NETWORK_MODULES,
    GuestImage,
    build_initramfs,
    command_for,
    with_dependencies,
)
from atelet.egress.sandbox import CA_BUNDLE, SandboxEgress
from atelet.errors import internal, invalid
from atelet.images import ImageStore
from atelet.netns import WorkerNet
from atelet.proto import atelet_pb2 as pb

PLAN_FILE = "plan.json"
DEFAULT_MEMORY_MIB = 256
"""Guest RAM when the template sets no memory limit."""
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,62})$")


def modules_dir(kernel_dir: Path) -> Path:
    """The guest kernel's modules, ``<kernel_dir>/lib/modules/<version>/``.

    Raises:
        AteletError: INTERNAL when there are none (what to run named).
    """
    try:
        return next((kernel_dir / "lib/modules").iterdir())
    except (OSError, StopIteration):
        raise internal(f"no guest kernel modules in {kernel_dir}/lib/modules: run scripts/guest-kernel.sh"
                       " (scripts/install.sh does)") from None  # fmt: skip


async def prepare_guest(workdir: Path, net: WorkerNet, spec: pb.WorkloadSpec, volume_dirs: dict[str, Path],
                        hostname: str, *, images: ImageStore, kernel_dir: Path, initramfs_cache: Path,
                        durable_dir_mib: int, egress: SandboxEgress | None = None) -> Path:  # fmt: skip
    """Unpacks the image, writes the guest's initramfs (cached per image and command), one
    disk per durable dir (from its host dir, created when missing) and ``plan.json``.

    Args:
        workdir: The worker's dir the disks and ``plan.json`` go into (created).
        net: The worker's network (the guest's address goes on its kernel command line).
        spec: The workload; its single container is the guest.
        volume_dirs: The durable dirs by volume name (host dirs).
        hostname: The guest's hostname (left out unless a valid one).
        images: Where the container's image is unpacked.
        kernel_dir: The guest kernel's dir (its modules go into the initramfs).
        initramfs_cache: The dir of built initramfs files, shared by the node's workers.
        durable_dir_mib: The size of each durable dir's disk (MiB; sparse on the host).
        egress: The node's egress settings: their environment, and the CA bundle a gVisor
            sandbox mounts written into the initramfs at the same path (a VM takes no bind mount).

    Returns:
        ``workdir``.

    Raises:
        AteletError: INVALID_ARGUMENT for a command not in the image, INTERNAL for a disk
            that cannot be made.
    """
    container = spec.containers[0]
    image = await images.unpack(container.image, "spec.containers[0].image")
    for d in volume_dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    process = build_config(image, container, net.netns_path, volume_dirs, egress=egress).get("process", {})
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
        modules = with_dependencies(modules_dir(kernel_dir), names)
    except FileNotFoundError as error:
        raise internal(f"the guest kernel in {kernel_dir} lacks a module the VM needs: {error}") from None
    try:
        files = ((CA_BUNDLE.lstrip("/"), egress.ca_mount.read_bytes()),) if egress and egress.ca_mount else ()
        initramfs = await asyncio.to_thread(cached_initramfs, GuestImage(command, modules=modules,
                                                                         rootfs=image.rootfs, user=user, files=files),
                                            initramfs_cache)  # fmt: skip
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
            await asyncio.to_thread(disk.build_disk, volume_dirs[mount.name], image_path, durable_dir_mib)
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


def cached_initramfs(guest: GuestImage, cache: Path) -> Path:
    """The initramfs of ``guest`` in ``cache``, built once per content (image, command, modules,
    init).

    Raises:
        ValueError: the image cannot be a guest (``build_initramfs``).
        OSError: it could not be written.
    """
    key = hashlib.sha256()
    for part in (guest.command, str(guest.rootfs), *map(str, guest.modules), str(guest.busybox), str(guest.user)):
        key.update(part.encode() + b"\0")
    for inside, content in guest.files:
        key.update(inside.encode() + b"\0" + hashlib.sha256(content).digest())
    key.update(INIT.read_bytes())
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
