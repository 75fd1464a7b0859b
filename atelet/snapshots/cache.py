"""The node's cache of snapshots from object storage: size-bounded, least recently used first out.

An actor suspended and resumed on the same node does not download again: a checkpoint to object
storage leaves its files here once uploaded, and a restore downloads only what is not here.
Snapshot URIs never name two contents (each generation is written under a unique key), so an
entry is identified by its URI and checked against the manifest it is asked for.

Layout: ``<root>/<sha256(uri)[:32]>/`` is one complete snapshot directory (manifest.json plus
its files); ``<root>/.staging-*`` are downloads or checkpoints in progress, removed at start.
A directory's modification time is its last use.

Safe under concurrent restores of the same snapshot: one download per URI at a time (the others
wait for it and then share the entry), and an entry in use (pinned) is never evicted.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from atelet.proto import atelet_pb2 as pb
from atelet.snapshots.manifest import MANIFEST, manifest_from_json, size_of

log = logging.getLogger(__name__)

STAGING = ".staging-"


@dataclass
class CacheStats:
    """What the cache did since the atelet started (exported as metrics)."""

    hits: int = 0
    misses: int = 0
    evictions: int = 0


class SnapshotCache:
    """Snapshots under ``root``, at most ``max_bytes`` of them (0: keep nothing once unpinned).

    Args:
        root: the cache directory (created).
        max_bytes: the bound on the files of all entries; the least recently used unpinned
            entries go first when it is passed.
    """

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.stats = CacheStats()
        self._locks: dict[str, asyncio.Lock] = {}
        self._pins: dict[str, int] = {}
        self._sizes: dict[str, int] = {}

    def start(self, keep: Collection[Path] = ()) -> None:
        """Create the root, remove staging leftovers of an earlier process (but those in ``keep``:
        checkpoints a restarted atelet finishes) and index the entries. Blocking."""
        self.root.mkdir(parents=True, exist_ok=True)
        kept = {Path(p).resolve() for p in keep}
        for child in self.root.iterdir():
            if child.resolve() in kept:
                continue
            if child.name.startswith(STAGING) or not (child / MANIFEST).is_file():
                shutil.rmtree(child, ignore_errors=True)
                continue
            try:
                self._sizes[child.name] = size_of(manifest_from_json((child / MANIFEST).read_text()))
            except Exception:  # an unreadable entry is dropped, never served
                shutil.rmtree(child, ignore_errors=True)

    @property
    def size_bytes(self) -> int:
        """Bytes held by the entries."""
        return sum(self._sizes.values())

    @staticmethod
    def key(uri: str) -> str:
        """The entry name of a snapshot URI."""
        return hashlib.sha256(uri.encode()).hexdigest()[:32]

    def staging(self) -> Path:
        """A fresh directory in the cache's filesystem for a download or a checkpoint."""
        path = self.root / f"{STAGING}{uuid.uuid4().hex[:12]}"
        path.mkdir(parents=True)
        return path

    def _matches(self, entry: Path, manifest: pb.SnapshotManifest) -> bool:
        """Whether ``entry`` holds exactly the files of ``manifest`` (path, sha256, size)."""
        try:
            held = manifest_from_json((entry / MANIFEST).read_text())
        except (OSError, ValueError):
            return False
        wanted = {(f.path, f.sha256, f.size_bytes) for f in manifest.files}
        if {(f.path, f.sha256, f.size_bytes) for f in held.files} != wanted:
            return False
        return all((entry / path).is_file() and (entry / path).stat().st_size == size for path, _, size in wanted)

    @contextlib.asynccontextmanager
    async def fetched(
        self, uri: str, manifest: pb.SnapshotManifest, download: Callable[[Path], Awaitable[None]]
    ) -> AsyncIterator[tuple[Path, bool]]:
        """The cached snapshot of ``uri``, downloaded first when it is not here, pinned while the
        caller uses it.

        Args:
            manifest: what the snapshot must hold; an entry that differs is downloaded again.
            download: fills a staging directory with the snapshot (files checked, manifest.json
                written); raises to abandon it.

        Yields:
            (the entry's directory, whether it was a cache hit).
        """
        key = self.key(uri)
        entry = self.root / key
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            hit = await asyncio.to_thread(self._matches, entry, manifest)
            if hit:
                self.stats.hits += 1
                os.utime(entry)
            else:
                self.stats.misses += 1
                staging = self.staging()
                try:
                    await download(staging)
                    await asyncio.to_thread(self._replace, entry, staging)
                except BaseException:
                    shutil.rmtree(staging, ignore_errors=True)
                    raise
                self._sizes[key] = size_of(manifest)
            self._pins[key] = self._pins.get(key, 0) + 1
        try:
            yield entry, hit
        finally:
            self._pins[key] -= 1
            if not self._pins[key]:
                del self._pins[key]
            await asyncio.to_thread(self.evict)

    def adopt(self, uri: str, directory: Path, manifest: pb.SnapshotManifest) -> None:
        """Make ``directory`` (a complete snapshot just uploaded to ``uri``, in the cache's
        filesystem) the entry of ``uri``; then evict to the bound. Blocking."""
        key = self.key(uri)
        if key in self._pins:  # in use: keep the entry that is there
            shutil.rmtree(directory, ignore_errors=True)
            return
        self._replace(self.root / key, directory)
        self._sizes[key] = size_of(manifest)
        self.evict()

    def forget(self, uri: str) -> None:
        """Drop the entry of ``uri`` (the snapshot was deleted from the store). Blocking."""
        key = self.key(uri)
        if key in self._pins:
            return
        shutil.rmtree(self.root / key, ignore_errors=True)
        self._sizes.pop(key, None)

    def evict(self) -> None:
        """Remove least recently used unpinned entries until the entries fit ``max_bytes``. Blocking."""
        if self.size_bytes <= self.max_bytes:
            return
        by_age = sorted(self._sizes, key=lambda k: _mtime(self.root / k))
        for key in by_age:
            if self.size_bytes <= self.max_bytes:
                break
            if key in self._pins:
                continue
            shutil.rmtree(self.root / key, ignore_errors=True)
            self._sizes.pop(key, None)
            self.stats.evictions += 1
            log.info("snapshot cache: evicted %s (cache now %d of %d bytes)", key, self.size_bytes, self.max_bytes)

    @staticmethod
    def _replace(entry: Path, staging: Path) -> None:
        """Move ``staging`` onto ``entry``, removing an older entry first."""
        if entry.exists():
            old = entry.with_name(f"{STAGING}old-{uuid.uuid4().hex[:8]}")
            os.rename(entry, old)
            shutil.rmtree(old, ignore_errors=True)
        os.rename(staging, entry)
        os.utime(entry)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()
