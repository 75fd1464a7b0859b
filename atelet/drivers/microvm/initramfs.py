"""The microvm guest's initramfs: the actor's root filesystem (an unpacked OCI image's), and in
``/.ate`` a static busybox, the kernel modules and the workload's command, with ate's init
(``init.sh``) as ``/init``; in the ``newc`` cpio format the Linux kernel unpacks at boot. The
guest runs from it in RAM, so what the actor writes outside its durable dir is part of the RAM
a checkpoint keeps.

The cpio writer is ours because the format is a dozen fixed-width fields per entry and the
standard library has none; what goes in is fixed by ``GuestImage``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

INIT = Path(__file__).resolve().parent / "init.sh"
"""ate's guest init (package data)."""

_DIR, _FILE, _CHAR = 0o040000, 0o100000, 0o020000


@dataclass(frozen=True)
class GuestImage:
    """What the guest's initramfs holds.

    Attributes:
        command: The workload, a ``sh`` script (``/.ate/command`` in the guest; ``command_for``
            makes one from a container's arguments, environment and working dir).
        busybox: A statically linked busybox on the host (Debian's busybox-static).
        modules: Kernel module files (``.ko``, uncompressed) to load at boot, in this order.
        rootfs: A root filesystem to put in (an unpacked image's ``rootfs``), or None for none.
    """

    command: str
    busybox: Path = field(default_factory=lambda: Path(shutil.which("busybox") or "/bin/busybox"))
    modules: tuple[Path, ...] = ()
    rootfs: Path | None = None


def command_for(args: list[str], env: list[str], cwd: str = "/") -> str:
    """The ``sh`` script that runs a container's process: in ``cwd``, with exactly ``env``
    (``NAME=value`` items, as in an OCI config) and ``args``.

    Raises:
        ValueError: ``args`` is empty.
    """
    if not args:
        raise ValueError("the container has no command (process.args is empty)")
    words = " ".join(shlex.quote(a) for a in args)
    assignments = " ".join(shlex.quote(e) for e in env)
    return f"cd {shlex.quote(cwd or '/')} && exec /.ate/bin/env -i {assignments} {words}\n"


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()
        self.inode = 1

    def entry(self, name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0)) -> None:
        encoded = name.encode() + b"\0"
        fields = [self.inode, mode, 0, 0, 2 if mode & _DIR else 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(encoded), 0]
        self.inode += 1
        self.out += b"070701" + b"".join(f"{value:08x}".encode() for value in fields) + encoded
        self.out += b"\0" * (-len(self.out) % 4)
        self.out += data
        self.out += b"\0" * (-len(self.out) % 4)

    def finish(self) -> bytes:
        self.entry("TRAILER!!!", 0)
        return bytes(self.out)


NETWORK_MODULES = ("virtio_pci", "virtio_net")
"""The guest kernel modules the network needs (their dependencies are added by ``with_dependencies``)."""


def _depends(module: Path) -> list[str]:
    """The ``depends=`` of a module's ``.modinfo`` (names, possibly none)."""
    data = module.read_bytes()
    at = data.find(b"\0depends=")
    if at < 0:
        return []
    value = data[at + len(b"\0depends=") : data.index(b"\0", at + 1)]
    return [name for name in value.decode().split(",") if name]


def with_dependencies(modules_dir: Path, names: tuple[str, ...]) -> tuple[Path, ...]:
    """The module files of ``names`` and of everything they depend on, each after its
    dependencies (the order ``insmod`` needs), from a kernel's ``lib/modules/<version>``.

    Raises:
        FileNotFoundError: a module is not there (or is built into the kernel).
    """
    files = {path.name.removesuffix(".ko").replace("-", "_"): path for path in modules_dir.rglob("*.ko")}
    ordered: list[Path] = []

    def visit(name: str, seen: frozenset[str]) -> None:
        key = name.replace("-", "_")
        if key not in files:
            raise FileNotFoundError(f"kernel module {name} is not in {modules_dir}")
        if files[key] in ordered or key in seen:
            return
        for dependency in _depends(files[key]):
            visit(dependency, seen | {key})
        ordered.append(files[key])

    for name in names:
        visit(name, frozenset())
    return tuple(ordered)


def _add_tree(writer: _Writer, root: Path) -> None:
    """Every directory, file and symlink under ``root``, with its mode (owner root)."""
    for directory, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted([*dirs, *files]):
            path = Path(directory) / name
            relative = str(path.relative_to(root))
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                writer.entry(relative, 0o120777, os.readlink(path).encode())
            elif stat.S_ISDIR(info.st_mode):
                writer.entry(relative, _DIR | stat.S_IMODE(info.st_mode))
            elif stat.S_ISREG(info.st_mode):
                writer.entry(relative, _FILE | stat.S_IMODE(info.st_mode), path.read_bytes())
            # devices, fifos and sockets of an image are not carried (the guest makes its /dev)


def build_initramfs(image: GuestImage, path: Path) -> Path:
    """Write the initramfs of ``image`` to ``path`` (uncompressed newc cpio).

    Returns:
        ``path``.

    Raises:
        FileNotFoundError: the busybox or a module file is missing.
        ValueError: the busybox is not statically linked (the guest has no libc).
    """
    busybox = image.busybox.read_bytes()
    if b"ld-linux" in busybox[:4096] or b"/lib64/ld-" in busybox:
        raise ValueError(f"busybox {image.busybox} is dynamically linked; the guest needs a static one (busybox-static)")
    writer = _Writer()
    if image.rootfs is not None:
        _add_tree(writer, image.rootfs)
    for directory in ("dev", "proc", "sys", "tmp", ".ate", ".ate/bin", ".ate/modules"):
        writer.entry(directory, _DIR | 0o755)
    writer.entry("dev/console", _CHAR | 0o600, rdev=(5, 1))  # init's stdio before devtmpfs
    writer.entry(".ate/busybox", _FILE | 0o755, busybox)
    writer.entry("init", _FILE | 0o755, INIT.read_bytes())
    writer.entry(".ate/command", _FILE | 0o644, image.command.encode())
    listed = []
    for module in image.modules:
        name = f".ate/modules/{module.name}"
        writer.entry(name, _FILE | 0o644, module.read_bytes())
        listed.append("/" + name)
    writer.entry(".ate/modules.list", _FILE | 0o644, "".join(f"{m}\n" for m in listed).encode())
    path.write_bytes(writer.finish())
    return path
