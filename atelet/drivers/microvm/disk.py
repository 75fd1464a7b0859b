"""The microvm guest's durable dirs: each one an ext4 disk image on a virtio-blk card.

The node keeps an actor's durable dir as a host directory (what a DATA snapshot archives, what
`ate revert` brings back). For a VM it becomes a disk image at the start (``build_disk``:
``mke2fs -d`` copies the dir in) and a directory again once the VM stopped (``extract_disk``:
``debugfs rdump``), so the node's snapshot code does not change. A FULL checkpoint keeps the
image itself next to the RAM: the guest's memory holds that very filesystem's caches, so a
restore must see the image as it was, not one rebuilt from the dir.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

DISK_MODULES = ("virtio_blk",)
"""The guest kernel modules the disks need (ext4 is built into Debian's cloud kernel)."""


class DiskError(Exception):
    """A durable dir could not be made into a disk image, or back; the message says why."""


def _run(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=cwd)
    if done.returncode != 0:
        raise DiskError(f"{argv[0]} failed ({done.returncode}): {(done.stderr or done.stdout).strip()}")
    return done


def build_disk(source: Path, image: Path, size_mib: int) -> Path:
    """Make ``image``, an ext4 filesystem of ``size_mib`` MiB holding a copy of dir ``source``.

    Raises:
        DiskError: ``mke2fs`` refused (e.g. the dir does not fit), its message included.
    """
    image.unlink(missing_ok=True)
    _run(["mke2fs", "-q", "-F", "-t", "ext4", "-d", str(source), "-L", "ate-durable", str(image), f"{size_mib}M"])
    return image


def extract_disk(image: Path, target: Path) -> Path:
    """Replace dir ``target`` by the files of ext4 image ``image`` (the VM must be stopped);
    the new dir is complete before the old one goes.

    Raises:
        DiskError: the image is not a readable ext4 filesystem.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    # Replay the journal (the VM may have been stopped with committed writes not yet in place);
    # e2fsck exits 1 or 2 when it fixed something, 4 and above when it could not.
    done = subprocess.run(["e2fsck", "-f", "-p", str(image)], capture_output=True, text=True, check=False)
    if done.returncode >= 4:
        raise DiskError(f"e2fsck found {image} damaged ({done.returncode}): {(done.stderr or done.stdout).strip()}")
    fresh = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-new-"))
    try:
        _run(["debugfs", "-R", "rdump / .", str(image.resolve())], cwd=fresh)  # no path in debugfs's words
        shutil.rmtree(fresh / "lost+found", ignore_errors=True)
        old = target.parent / f".{target.name}-old"
        shutil.rmtree(old, ignore_errors=True)
        if target.exists():
            target.rename(old)
        fresh.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
    return target
