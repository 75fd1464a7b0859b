"""SHA-256 of snapshot files, remembered per file identity.

Every restore checks each file of a snapshot against its manifest. A file this atelet hashed
itself (it wrote the snapshot, or checked it before) and that has not changed since is not read
again: the remembered digest stands for the file while its identity holds, i.e. the same
device, inode, size, modification time and change time (both in nanoseconds). Any write to the
file, a rename over it or a replacement changes the change time, so the file is hashed again.
A 128 MiB snapshot is then checked in microseconds instead of ~75 ms (bench/README.md,
"activation"). The memory is bounded (least recently used identities are forgotten first).

File times come from a coarse clock (a few ms per tick), so two writes within one tick leave the
same times. A digest is therefore remembered only when the file's last change is at least
``SETTLED_NS`` older than the start of its hashing (as git treats "racily clean" files): any
write from then on, during the hashing or after, lands on a later tick and changes the identity.

What it does not see: corruption at rest that bypasses the file's inode (the disk, the block
device, a writable shared mapping of already dirty pages), and, on a network filesystem under a
``file://`` root, attributes the client cached. A digest is therefore trusted for
``REMEMBER_SECONDS`` at most; then the file is read again at its next check.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

FileIdentity = tuple[int, int, int, int, int]
"""(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)."""

REMEMBERED_FILES = 65536
"""How many file digests are kept."""

SETTLED_NS = 20_000_000
"""How long before the start of its hashing a file must have last changed for its digest to be
remembered (20 ms: several ticks of the kernel's coarse file clock)."""

SETTLE_FOR_BYTES = 8 * 2**20
"""A file at least this large, hashed right after it was written (a checkpoint being committed),
is first left to settle: waiting at most ``SETTLED_NS`` once costs less than reading it again at
the restore that follows (75 ms for 128 MiB here)."""

REMEMBER_SECONDS = 600.0
"""How long a remembered digest is trusted before the file is read again."""


def _identity(stat: os.stat_result) -> FileIdentity:
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def _hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class FileDigests:
    """Hex SHA-256 of files, each remembered while the file's identity stays the same.

    Args:
        capacity: how many files are remembered at most.
        clock: seconds of a monotonic clock (the lifetime of a remembered digest is measured on it).
    """

    def __init__(self, capacity: int = REMEMBERED_FILES, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = capacity
        self._clock = clock
        self._known: OrderedDict[FileIdentity, tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()  # callers hash in worker threads (asyncio.to_thread)
        self.hashed_bytes = 0
        """Bytes read to hash so far (what a remembered digest saved shows here as not read)."""

    def sha256(self, path: Path, *, settle: bool = False) -> str:
        """The hex SHA-256 of ``path``'s content: remembered when the file is unchanged since it
        was last hashed here, else read whole (and remembered when it did not change meanwhile).
        ``settle``: a large file changed less than ``SETTLED_NS`` ago is waited for first, so
        that its digest can be remembered. Blocking.

        Raises:
            OSError: the file cannot be read.
        """
        if settle:
            stat = os.stat(path)
            young_ns = SETTLED_NS - (time.time_ns() - stat.st_ctime_ns)
            if stat.st_size >= SETTLE_FOR_BYTES and 0 < young_ns <= SETTLED_NS:
                time.sleep(young_ns / 1e9 + 0.001)
        started_ns = time.time_ns()
        before = _identity(os.stat(path))
        now = self._clock()
        with self._lock:
            known = self._known.get(before)
            if known is not None and now - known[1] < REMEMBER_SECONDS:
                self._known.move_to_end(before)
                return known[0]
        digest = _hash(path)
        after = _identity(os.stat(path))
        with self._lock:
            self.hashed_bytes += before[2]
            if after == before and started_ns - before[4] >= SETTLED_NS:
                self._known[after] = (digest, now)
                self._known.move_to_end(after)
                while len(self._known) > self.capacity:
                    self._known.popitem(last=False)
        return digest

    def forget(self) -> None:
        """Forget every digest (the next check of any file reads it)."""
        with self._lock:
            self._known.clear()


DIGESTS = FileDigests()
"""The atelet's one memory of file digests."""
