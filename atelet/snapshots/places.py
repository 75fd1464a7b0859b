"""Reading and writing a snapshot wherever its URI puts it: a directory (``file://``, ``local:``)
or object storage (``s3://``, ``gs://``, ``az://``, through the node's cache).

- ``open_for_restore``: the snapshot's directory on this node, checked against its manifest,
  for as long as a restore reads it. Object storage: fetched into the cache (downloaded and
  checked while streaming on a miss), pinned meanwhile.
- ``checkpoint_target``: where a checkpoint writes and how it is committed. A directory: staged
  next to the destination, hashed, manifest.json written last, renamed into place. Object
  storage: staged in the cache, hashed, every file uploaded, the manifest object last; the
  staged directory then becomes the cache entry, so a resume on this node needs no download.
- ``delete``: the snapshot's directory or objects (and its cache entry).

``runsc restore`` reads its image files whole when it starts (this build has no lazy restore),
so a restore from object storage begins once the download is complete; files download in
parallel, each checked as it streams in.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from atelet import metrics
from atelet.errors import invalid, precondition
from atelet.proto import atelet_pb2 as pb
from atelet.snapshots.cache import SnapshotCache
from atelet.snapshots.manifest import hash_into, write_manifest
from atelet.snapshots.remote import ObjectLocation, ObjectStores, is_remote, missing
from atelet.snapshots.store import SnapshotStore
from domain.failpoints import failpoint


@dataclass
class Opened:
    """A snapshot ready to restore: its directory, the manifest it was checked against, and how
    it got here (``fetch_seconds`` of the download, ``cache_hit`` for object storage)."""

    directory: Path
    manifest: pb.SnapshotManifest
    fetch_seconds: float = 0.0
    cache_hit: bool = False


class CheckpointTarget:
    """Where one checkpoint is written (``staging``) and how it becomes the snapshot (``commit``)."""

    def __init__(self, places: SnapshotPlaces, uri: str, staging: Path, dest: Path | None,
                 location: ObjectLocation | None) -> None:
        self.places = places
        self.uri = uri
        self.staging = staging
        self.dest = dest
        self.location = location
        self.store_seconds = 0.0

    async def commit(self, manifest: pb.SnapshotManifest) -> pb.SnapshotManifest:
        """Hash the staged files into ``manifest`` and store the snapshot at its URI (the manifest
        last). Returns the completed manifest.

        Raises:
            AteletError: FAILED_PRECONDITION when the destination appeared meanwhile; the store's
                errors for object storage (the staging dir is then removed).
        """
        if self.dest is not None:
            return await self.places.store.finalize(self.staging, self.dest, manifest)
        assert self.location is not None
        try:
            await asyncio.to_thread(hash_into, self.staging, manifest)
            await failpoint("Atelet.checkpoint.before_upload")
            start = time.monotonic()
            await self.places.objects.upload(self.staging, self.location, manifest)
            self.store_seconds = time.monotonic() - start
            await asyncio.to_thread(write_manifest, self.staging, manifest)
        except BaseException:
            self.discard()
            raise
        await asyncio.to_thread(self.places.cache.adopt, self.uri, self.staging, manifest)
        return manifest

    def discard(self) -> None:
        """Remove the staging directory (after a failure)."""
        shutil.rmtree(self.staging, ignore_errors=True)


class SnapshotPlaces:
    """The node's snapshots, on its disk and in object storage.

    Args:
        store: directories (``file://`` roots and the ``local:`` root).
        objects: the object stores this node may use.
        cache: the cache of snapshots from object storage.
    """

    def __init__(self, store: SnapshotStore, objects: ObjectStores, cache: SnapshotCache) -> None:
        self.store = store
        self.objects = objects
        self.cache = cache

    def check(self, uri: str, field: str = "snapshot_uri") -> None:
        """Refuse a URI this node may not use (INVALID_ARGUMENT naming ``field``), before any work."""
        if is_remote(uri):
            self.objects.location(uri, field)
        else:
            self.store.resolve(uri, field)

    @contextlib.asynccontextmanager
    async def open_for_restore(self, uri: str, manifest: pb.SnapshotManifest, sandbox_class: str,
                               runtime_version: str) -> AsyncIterator[Opened]:
        """The snapshot at ``uri`` on this node's disk, checked against ``manifest`` (SHA-256 of
        every file; the sandbox class; for FULL the runtime build), for the duration.

        Raises:
            AteletError: NOT_FOUND (no snapshot), FAILED_PRECONDITION (a mismatch, naming the file),
                the store's errors for object storage.
        """
        if not is_remote(uri):
            dest = self.store.resolve(uri)
            checked = await self.store.verify(dest, manifest, sandbox_class, runtime_version)
            yield Opened(directory=dest, manifest=checked)
            return
        location = self.objects.location(uri, "snapshot_uri")
        if not manifest.files:
            stored = await self.objects.read_manifest(location)
            if stored is None:
                raise missing(location, "snapshot_uri")
            manifest = stored
        self.store.check_runtime(manifest, sandbox_class, runtime_version)
        start = time.monotonic()

        async def download(staging: Path) -> None:
            await failpoint("Atelet.restore.before_download")
            await self.objects.download(location, manifest, staging)

        async with self.cache.fetched(uri, manifest, download) as (directory, hit):
            metrics.observe_cache(hit, self.cache.size_bytes)
            yield Opened(directory=directory, manifest=manifest, fetch_seconds=time.monotonic() - start,
                         cache_hit=hit)

    async def existing(self, uri: str) -> pb.SnapshotManifest | None:
        """The manifest of a completed snapshot at ``uri``, None when there is none; for a
        directory, FAILED_PRECONDITION when something incomplete is there."""
        if is_remote(uri):
            return await self.objects.read_manifest(self.objects.location(uri, "snapshot_uri"))
        dest = self.store.resolve(uri)
        if not dest.exists():
            return None
        held = self.store.read_manifest(dest)
        if held is None:
            raise precondition(f"snapshot_uri: {uri} already exists (written by operation unknown, incomplete)")
        return held

    def checkpoint_target(self, uri: str, staging: Path | None = None) -> CheckpointTarget:
        """A fresh staging directory for a checkpoint to ``uri`` (see the module docstring), or
        ``staging``, the one an unfinished checkpoint to ``uri`` has filled."""
        if is_remote(uri):
            location = self.objects.location(uri, "snapshot_uri")
            return CheckpointTarget(self, uri, staging or self.cache.staging(), None, location)
        dest = self.store.resolve(uri)
        return CheckpointTarget(self, uri, staging or self.store.staging_dir(dest), dest, None)

    async def delete(self, uri: str) -> bool:
        """Delete the snapshot at ``uri`` (and its cache entry). True when something was there."""
        if is_remote(uri):
            existed = await self.objects.delete(self.objects.location(uri, "snapshot_uri"))
            await asyncio.to_thread(self.cache.forget, uri)
            return existed
        return await asyncio.to_thread(self.store.delete, self.store.resolve(uri))

    async def copy(self, source_uri: str, destination_uri: str,
                   manifest: pb.SnapshotManifest) -> tuple[pb.SnapshotManifest, bool]:
        """Copy the completed snapshot at ``source_uri`` (a directory) to ``destination_uri``
        (a directory or object storage). Returns (the manifest, True when files were copied).

        Idempotent: a destination that already holds the same files is left as it is.

        Raises:
            AteletError: as ``SnapshotStore.copy`` for directories; for object storage,
                FAILED_PRECONDITION when the destination holds another snapshot or a source file
                differs from the manifest, and the store's errors.
        """
        if not is_remote(destination_uri):
            return await self.store.copy(source_uri, destination_uri, manifest)
        if is_remote(source_uri):
            raise invalid(f"source_uri: {source_uri!r}: copies start from a snapshot on this node")
        location = self.objects.location(destination_uri, "destination_uri")
        source = self.store.resolve(source_uri, "source_uri")
        expected = await asyncio.to_thread(self.store.expected, source, manifest, "source_uri", source_uri)
        held = await self.objects.read_manifest(location)
        if held is not None:
            if {(f.path, f.sha256, f.size_bytes) for f in held.files} != {
                    (f.path, f.sha256, f.size_bytes) for f in expected.files}:  # fmt: skip
                raise precondition(f"destination_uri: {destination_uri!r} already holds a different snapshot")
            return expected, False
        await self.store.verify_files(source, expected, "source_uri", source_uri)
        await self.objects.upload(source, location, expected)
        return expected, True

