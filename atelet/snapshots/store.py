"""The node's snapshot store: writing, reading, verifying, copying and deleting snapshot directories.

Where a URI points is ``atelet.snapshots.uris``; what a snapshot directory holds is
``atelet.snapshots.manifest``.

Writing: the caller fills a staging dir next to the destination (same filesystem, ``staging_dir``);
``finalize`` hashes every file (sha256, size), writes ``manifest.json`` last and renames the
staging dir onto the destination, so a crash never leaves a half snapshot at the final URI.
Copying: ``copy`` (``atelet.snapshots.copy``) copies a completed snapshot to another URI the same
way.
Deleting: ``delete`` removes a snapshot directory (symlinks inside it are removed, never followed),
staging leftovers of the same destination, and then the parent directories that became empty, up
to but not including the snapshot root (or the local root).
Reading: ``verify`` checks the files against the manifest it is given (sha256, size, sandbox
class, runsc version for FULL) and raises FAILED_PRECONDITION with the first mismatch.
"""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import uuid
from collections.abc import Collection
from pathlib import Path

from google.protobuf import json_format

from atelet.errors import AteletError, damaged, internal, not_found, precondition
from atelet.proto import atelet_pb2 as pb
from atelet.snapshots.copy import copy_snapshot
from atelet.snapshots.manifest import (
    MANIFEST,
    check_sizes,
    hash_into,
    manifest_from_json,
    sha256_file,
    size_of,
    write_manifest,
)
from atelet.snapshots.uris import SnapshotRoots

STAGING_PREFIX = ".ate-staging-"


class SnapshotStore(SnapshotRoots):
    """Snapshot directories under ``roots`` (``file://``) and ``local_root`` (``local:``), all made
    absolute and symlink-free at construction.

    ``local_root`` None: ``local:`` URIs are refused. SnapshotRootError (a ValueError) when
    ``local_root`` contains one of ``roots`` (``local:`` URIs could then reach into the storage
    location).
    """

    def _missing(self, field: str, dest: Path, uri: str = "") -> AteletError:
        """NOT_FOUND for a snapshot that is not at ``dest``."""
        named = f"{uri!r} ({dest})" if uri else str(dest)
        if self.is_local(dest):
            return not_found(f"{field}: no snapshot at {named}: the local snapshot is gone from this node")
        return not_found(f"{field}: no snapshot at {named}")

    def read_manifest(self, dest: Path) -> pb.SnapshotManifest | None:
        """The manifest of a completed snapshot at ``dest``, None when there is none."""
        try:
            return manifest_from_json((dest / MANIFEST).read_text())
        except FileNotFoundError:
            return None
        except (OSError, json_format.ParseError) as exc:
            raise internal(f"unreadable manifest at {dest}: {exc}") from None

    @staticmethod
    def size_of(manifest: pb.SnapshotManifest) -> int:
        """Total bytes of the manifest's files."""
        return size_of(manifest)

    def staging_dir(self, dest: Path) -> Path:
        """A fresh, empty staging dir next to ``dest`` (created, with parents)."""
        staging = dest.parent / f"{STAGING_PREFIX}{dest.name}-{uuid.uuid4().hex[:12]}"
        for attempt in range(3):  # a concurrent delete may remove an empty parent meanwhile
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                staging.mkdir()
                break
            except FileNotFoundError:
                if attempt == 2:
                    raise
        return staging

    def delete(self, dest: Path) -> bool:
        """Removes the snapshot at ``dest`` (a path from ``resolve``) and its staging leftovers, then
        the empty parents below its root. True when a snapshot directory was there. Blocking."""
        root = self.root_of(dest)
        existed = False
        if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
            raise precondition(f"snapshot_uri: {dest} is not a snapshot directory")
        if dest.is_dir():
            shutil.rmtree(dest)
            existed = True
        for leftover in glob.glob(glob.escape(str(dest.parent / f"{STAGING_PREFIX}{dest.name}-")) + "*"):
            shutil.rmtree(leftover, ignore_errors=True)
        parent = dest.parent
        while parent != root and parent.is_relative_to(root):
            try:
                parent.rmdir()
            except OSError:  # not empty (or already gone): stop here
                break
            parent = parent.parent
        return existed

    def remove_local_staging(self, keep: Collection[Path] = ()) -> list[Path]:
        """Removes the staging dirs left in the local root by a previous atelet process (a checkpoint
        or copy it never finished), but those in ``keep`` (checkpoints a restarted atelet
        finishes); completed snapshots are not descended into. Returns what was removed. Only for
        the local root: nothing else writes there, unlike a shared storage location. Blocking;
        call before serving."""
        removed: list[Path] = []
        kept = {Path(p).resolve() for p in keep}
        if self.local_root is None or not self.local_root.is_dir():
            return removed
        for dirpath, dirnames, filenames in os.walk(self.local_root):
            if MANIFEST in filenames:  # a completed snapshot: nothing to clean inside
                dirnames.clear()
                continue
            for name in list(dirnames):
                if name.startswith(STAGING_PREFIX):
                    dirnames.remove(name)
                    if (Path(dirpath) / name).resolve() in kept:
                        continue
                    shutil.rmtree(Path(dirpath) / name, ignore_errors=True)
                    removed.append(Path(dirpath) / name)
        return removed

    @staticmethod
    def discard(staging: Path) -> None:
        """Removes a staging dir (after a failure)."""
        shutil.rmtree(staging, ignore_errors=True)

    async def finalize(self, staging: Path, dest: Path, manifest: pb.SnapshotManifest) -> pb.SnapshotManifest:
        """Hashes the staged files into ``manifest.files``, writes manifest.json, renames onto ``dest``.

        FAILED_PRECONDITION when ``dest`` appeared meanwhile (the staging dir is then removed).
        """
        def work() -> pb.SnapshotManifest:
            hash_into(staging, manifest)
            write_manifest(staging, manifest)
            if dest.exists():
                raise precondition(f"snapshot_uri: {dest} already exists")
            os.rename(staging, dest)
            return manifest

        try:
            return await asyncio.to_thread(work)
        except BaseException:
            self.discard(staging)
            raise

    def expected(self, dest: Path, manifest: pb.SnapshotManifest, field: str, uri: str = "") -> pb.SnapshotManifest:
        """``manifest``, or when it lists no files the stored manifest.json of the snapshot at
        ``dest``; NOT_FOUND when there is no snapshot, FAILED_PRECONDITION on a scope mismatch.
        Blocking."""
        if not dest.is_dir():
            raise self._missing(field, dest, uri)
        if manifest.files:
            return manifest
        stored = self.read_manifest(dest)
        if stored is None:
            named = f"{uri!r} ({dest})" if uri else str(dest)
            raise not_found(f"{field}: {named} holds no completed snapshot (no {MANIFEST})")
        if manifest.scope and manifest.scope != stored.scope:
            raise precondition(f"manifest.scope: request says {pb.SnapshotScope.Name(manifest.scope)}, "
                               f"snapshot is {pb.SnapshotScope.Name(stored.scope)}")
        return stored

    @staticmethod
    def check_runtime(manifest: pb.SnapshotManifest, sandbox_class: str, runtime_version: str) -> None:
        """FAILED_PRECONDITION unless the snapshot is of ``sandbox_class`` and, for scope FULL,
        was written by the runtime build ``runtime_version`` (a checkpoint restores only there)."""
        if manifest.sandbox_class != sandbox_class:
            raise precondition(f"manifest.sandbox_class: snapshot is {manifest.sandbox_class!r}, "
                               f"this node runs {sandbox_class!r}")
        if manifest.scope not in (pb.SNAPSHOT_SCOPE_FULL, pb.SNAPSHOT_SCOPE_DATA):
            raise precondition("manifest.scope: must be FULL or DATA")
        if manifest.scope == pb.SNAPSHOT_SCOPE_FULL and manifest.runsc_version != runtime_version:
            runtime = "runsc" if sandbox_class == "gvisor" else "the runtime"
            raise precondition(f"manifest.runsc_version: snapshot was written by {runtime} {manifest.runsc_version!r}, "
                               f"this node has {runtime_version!r}; a checkpoint restores only with its own build")

    @staticmethod
    async def verify_files(dest: Path, manifest: pb.SnapshotManifest, field: str = "", uri: str = "") -> None:
        """DATA_LOSS naming the first file of ``manifest`` that is missing at ``dest`` or differs
        from it (size, then SHA-256); ``field`` and ``uri`` prefix the reason when given."""
        def check() -> None:
            check_sizes(dest, manifest)
            for entry in manifest.files:
                digest = sha256_file(dest / entry.path)
                if digest != entry.sha256:
                    raise damaged(f"snapshot file {entry.path}: sha256 {digest} != manifest {entry.sha256}")

        try:
            await asyncio.to_thread(check)
        except AteletError as exc:
            if not field:
                raise
            raise AteletError(exc.code, f"{field}: {uri!r}: {exc.reason}") from None

    async def verify(self, dest: Path, manifest: pb.SnapshotManifest, sandbox_class: str,
                     runsc_version: str) -> pb.SnapshotManifest:
        """Checks the snapshot at ``dest`` against ``manifest`` (or, when it lists no files, against
        the stored manifest.json): its sandbox class must be ``sandbox_class`` and, for scope FULL,
        its runtime build ``runsc_version``. Returns the manifest used. NOT_FOUND when there is no
        snapshot, FAILED_PRECONDITION on any mismatch."""
        manifest = self.expected(dest, manifest, "snapshot_uri")
        self.check_runtime(manifest, sandbox_class, runsc_version)
        await self.verify_files(dest, manifest)
        return manifest

    async def copy(self, source_uri: str, destination_uri: str,
                   manifest: pb.SnapshotManifest) -> tuple[pb.SnapshotManifest, bool]:
        """Copies the completed snapshot at ``source_uri`` to ``destination_uri`` (idempotent).

        Args:
            source_uri: ``file://`` or ``local:`` URI of a completed snapshot.
            destination_uri: where the copy goes; must not overlap the source.
            manifest: the snapshot's manifest; when it lists no files, the source's stored one.

        Returns:
            (the manifest, True when files were copied; False when the destination already held it).

        Raises:
            AteletError: INVALID_ARGUMENT, NOT_FOUND or FAILED_PRECONDITION, as
                ``atelet.snapshots.copy.copy_snapshot`` explains.
        """
        return await copy_snapshot(self, source_uri, destination_uri, manifest)
