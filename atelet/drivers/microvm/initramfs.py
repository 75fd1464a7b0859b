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
from typing import BinaryIO

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
        user: ``(uid, gid)`` the command runs as (the OCI config's ``process.user``), or None
            for root: the guest gets a passwd entry ``WORKLOAD_USER`` with them, over the
            image's own ``/etc/passwd`` and ``/etc/group`` (kept, with that entry added).
        files: ``(path, content)`` of files added over the image's (paths relative to ``/``,
            mode 0644, their missing parent dirs made 0755): what a gVisor sandbox gets as a
            bind mount, such as the egress CA bundle (``atelet.egress.sandbox``).
    """

    command: str
    busybox: Path = field(default_factory=lambda: Path(shutil.which("busybox") or "/bin/busybox"))
    modules: tuple[Path, ...] = ()
    rootfs: Path | None = None
    user: tuple[int, int] | None = None
    files: tuple[tuple[str, bytes], ...] = ()


WORKLOAD_USER = "ate-workload"
"""The guest's name for the container's user when it is not root (busybox ``su`` takes names)."""


def command_for(args: list[str], env: list[str], cwd: str = "/", rootfs: Path | None = None,
                user: tuple[int, int] | None = None) -> str:
    """The ``sh`` script that runs a container's process: in ``cwd``, with exactly ``env``
    (``NAME=value`` items, as in an OCI config) and ``args``, as ``user`` (``(uid, gid)``; None
    or uid 0: root) through busybox ``su`` to ``WORKLOAD_USER`` (its supplementary groups are
    not set). A command named without a path is looked up now in ``rootfs`` along the env's
    ``PATH``, so the guest runs the image's program and never a busybox applet of the same name.

    Raises:
        ValueError: ``args`` is empty, or its command is not in the image.
    """
    if not args:
        raise ValueError("the container has no command (process.args is empty)")
    program = args[0]
    if "/" not in program and rootfs is not None:
        path = next((e.split("=", 1)[1] for e in env if e.startswith("PATH=")), "/usr/local/bin:/usr/bin:/bin")
        found = [f"{d.rstrip('/')}/{program}" for d in path.split(":") if d and _is_file(rootfs, f"{d}/{program}")]
        if not found:
            raise ValueError(f"command {program!r} is not in the image along PATH={path}")
        program = found[0]
    words = " ".join(shlex.quote(a) for a in [program, *args[1:]])
    assignments = " ".join(shlex.quote(e) for e in env)
    run = f"exec /.ate/bin/env -i {assignments} {words}"
    if user is not None and user[0] != 0:
        run = f"exec /.ate/bin/su -s /.ate/bin/sh -c {shlex.quote(run)} {WORKLOAD_USER}"
    return f"cd {shlex.quote(cwd or '/')} && {run}\n"


def _is_file(rootfs: Path, inside: str) -> bool:
    """Whether ``inside`` (an absolute path in the image) is a file, its symlinks and ``..``
    resolved within the image (never above its root, never onto the host's files)."""
    parts = [part for part in inside.split("/") if part]
    current, hops = rootfs, 0
    while parts:
        part = parts.pop(0)
        if part == ".":
            continue
        if part == "..":
            current = current.parent if current != rootfs else rootfs
            continue
        candidate = current / part
        if candidate.is_symlink():
            hops += 1
            if hops > 40:
                return False
            target = os.readlink(candidate)
            if target.startswith("/"):
                current = rootfs
            parts = [piece for piece in target.split("/") if piece] + parts
            continue
        current = candidate
    return current.is_file()


MAX_FILE_BYTES = 2**32 - 1
"""The largest file a newc cpio entry can hold (an 8-hex-digit size)."""


class _Writer:
    """Writes newc entries to ``out`` as they come (a file's data is copied from its path in
    pieces, so an image of any size is never held in memory)."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.written = 0
        self.inode = 1

    def _write(self, data: bytes) -> None:
        self.out.write(data)
        self.written += len(data)

    def _pad(self) -> None:
        self._write(b"\0" * (-self.written % 4))

    def entry(self, name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0),
              source: Path | None = None) -> None:
        encoded = os.fsencode(name) + b"\0"
        size = source.stat().st_size if source is not None else len(data)
        if size > MAX_FILE_BYTES:
            raise ValueError(f"{name} is {size} bytes; a guest initramfs entry holds at most {MAX_FILE_BYTES}")
        fields = [self.inode, mode, 0, 0, 2 if mode & _DIR else 1, 0, size, 0, 0, rdev[0], rdev[1], len(encoded), 0]
        self.inode += 1
        self._write(b"070701" + b"".join(f"{value:08x}".encode() for value in fields) + encoded)
        self._pad()
        if source is None:
            self._write(data)
        else:
            copied = 0
            with source.open("rb") as f:
                while piece := f.read(min(1 << 20, size - copied)):
                    self._write(piece)
                    copied += len(piece)
            if copied != size:
                raise ValueError(f"{name} changed size while it was packed ({size} -> {copied} bytes)")
        self._pad()

    def finish(self) -> None:
        self.entry("TRAILER!!!", 0)


NETWORK_MODULES = ("virtio_pci", "virtio_net", "virtio_console")
"""The guest kernel modules the network needs, with the channel that readdresses it (their
dependencies are added by ``with_dependencies``)."""


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
                writer.entry(relative, 0o120777, os.fsencode(os.readlink(path)))
            elif stat.S_ISDIR(info.st_mode):
                writer.entry(relative, _DIR | stat.S_IMODE(info.st_mode))
            elif stat.S_ISREG(info.st_mode):
                writer.entry(relative, _FILE | stat.S_IMODE(info.st_mode), source=path)
            # devices, fifos and sockets of an image are not carried (the guest makes its /dev)


def _add_user(writer: _Writer, rootfs: Path | None, uid: int, gid: int) -> None:
    """``/etc/passwd`` and ``/etc/group`` with ``WORKLOAD_USER`` (``uid``, ``gid``) added to the
    image's own (a later cpio entry of the same name replaces the earlier one)."""
    for name, line in (("passwd", f"{WORKLOAD_USER}:x:{uid}:{gid}::/:/.ate/bin/sh\n"),
                       ("group", f"{WORKLOAD_USER}:x:{gid}:\n")):  # fmt: skip
        own = b""
        if rootfs is not None and (rootfs / "etc" / name).is_file() and not (rootfs / "etc" / name).is_symlink():
            own = (rootfs / "etc" / name).read_bytes()
            own += b"" if not own or own.endswith(b"\n") else b"\n"
        if rootfs is None or not os.path.lexists(rootfs / "etc"):
            writer.entry("etc", _DIR | 0o755)
        writer.entry(f"etc/{name}", _FILE | 0o644, own + line.encode())


def build_initramfs(image: GuestImage, path: Path) -> Path:
    """Write the initramfs of ``image`` to ``path`` (uncompressed newc cpio).

    Returns:
        ``path``.

    Raises:
        FileNotFoundError: the busybox or a module file is missing.
        ValueError: the busybox is not statically linked (the guest has no libc), the image has
            its own ``/init`` or ``/.ate``, or a file of 4 GiB or more.
    """
    busybox = image.busybox.read_bytes()
    if b"ld-linux" in busybox[:4096] or b"/lib64/ld-" in busybox:
        raise ValueError(f"busybox {image.busybox} is dynamically linked; the guest needs a static one (busybox-static)")
    for reserved in ("init", ".ate"):  # before anything is written
        if image.rootfs is not None and os.path.lexists(image.rootfs / reserved):
            raise ValueError(f"the image has /{reserved}, which the guest's init needs for its own")
    with path.open("wb") as out:
        writer = _Writer(out)
        _write_all(writer, image, busybox)
    return path


def _write_all(writer: _Writer, image: GuestImage, busybox: bytes) -> None:
    """Every entry of ``image``'s initramfs, in the order the kernel unpacks them."""
    if image.rootfs is not None:
        _add_tree(writer, image.rootfs)
    for directory, mode in (("dev", 0o755), ("proc", 0o555), ("sys", 0o555), ("tmp", 0o1777), (".ate", 0o755),
                            (".ate/bin", 0o755), (".ate/modules", 0o755)):  # fmt: skip
        if image.rootfs is None or not os.path.lexists(image.rootfs / directory):
            writer.entry(directory, _DIR | mode)
    writer.entry("dev/console", _CHAR | 0o600, rdev=(5, 1))  # init's stdio before devtmpfs
    if image.user is not None and image.user[0] != 0:
        _add_user(writer, image.rootfs, *image.user)
    writer.entry(".ate/busybox", _FILE | 0o755, busybox)
    writer.entry("init", _FILE | 0o755, INIT.read_bytes())
    writer.entry(".ate/command", _FILE | 0o644, image.command.encode())
    listed = []
    for module in image.modules:
        name = f".ate/modules/{module.name}"
        writer.entry(name, _FILE | 0o644, source=module)
        listed.append("/" + name)
    writer.entry(".ate/modules.list", _FILE | 0o644, "".join(f"{m}\n" for m in listed).encode())
    made: set[str] = set()
    for inside, content in image.files:
        parts = inside.strip("/").split("/")
        for depth in range(1, len(parts)):
            directory = "/".join(parts[:depth])
            if directory not in made and (image.rootfs is None or not os.path.lexists(image.rootfs / directory)):
                writer.entry(directory, _DIR | 0o755)
            made.add(directory)
        writer.entry("/".join(parts), _FILE | 0o644, content)
    writer.finish()
