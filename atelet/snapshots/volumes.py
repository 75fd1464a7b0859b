"""Durable dirs into and out of a snapshot: one ``volumes/<name>.tar`` per durable-dir volume.

Both functions block (run them with ``asyncio.to_thread``).
"""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path


def archive_dir(src: Path, tar_path: Path) -> None:
    """Tars the content of ``src`` (relative names, no absolute paths) into ``tar_path``."""
    tar_path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tar_path, "w") as tar:
        for entry in sorted(src.iterdir()) if src.exists() else []:
            tar.add(entry, arcname=entry.name)


def extract_dir(tar_path: Path, dest: Path) -> None:
    """Replaces ``dest`` with the content of ``tar_path`` (tarfile's safe ``data`` filter)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with tarfile.open(tar_path, "r") as tar:
        tar.extractall(dest, filter="data")
