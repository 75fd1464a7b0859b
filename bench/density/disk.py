"""Disk use for the density run: bytes under a path (real and apparent), Temporal's db, free space."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def du(path: Path) -> dict[str, int]:
    """Real (allocated blocks) and apparent bytes, and files, under path; hard links once."""
    real = apparent = files = 0
    seen: set[tuple[int, int]] = set()
    if not path.exists():
        return {"real": 0, "apparent": 0, "files": 0}
    if not path.is_dir():
        st = path.lstat()
        return {"real": st.st_blocks * 512, "apparent": st.st_size, "files": 1}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in filenames + dirnames:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            real += st.st_blocks * 512
            if name in filenames:
                apparent += st.st_size
                files += 1
    return {"real": real, "apparent": apparent, "files": files}


def temporal_db(data_dir: Path) -> int:
    """Real bytes of the Temporal dev server's SQLite files (temporal.db and its -wal/-shm)."""
    return sum(du(f)["real"] for f in data_dir.glob("temporal.db*"))


def disk(path: Path) -> dict[str, int]:
    """Size, used and free bytes of the filesystem holding path."""
    u = shutil.disk_usage(path)
    return {"total": u.total, "used": u.used, "free": u.free}
