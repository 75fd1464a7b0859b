"""Copying a completed snapshot to another URI: ``SnapshotStore.copy`` (the upload of a paused
actor's local snapshot to the storage location).

The copy is staged next to the destination, each file hashed while copied and checked against the
manifest, fsynced, and renamed into place with its manifest.json written last, so a crash never
leaves a half snapshot at the destination.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from atelet.errors import AteletError, damaged, invalid, precondition
from atelet.proto import atelet_pb2 as pb
from atelet.snapshots.manifest import check_sizes, write_manifest

if TYPE_CHECKING:
    from atelet.snapshots.store import SnapshotStore


async def copy_snapshot(store: SnapshotStore, source_uri: str, destination_uri: str,
                        manifest: pb.SnapshotManifest) -> tuple[pb.SnapshotManifest, bool]:
    """Copies the completed snapshot at ``source_uri`` to ``destination_uri`` (both ``file://``
    or ``local:`` URIs). Returns (the manifest, True when files were copied).

    The manifest is ``manifest``, or when it lists no files the source's stored manifest.json.
    Each file listed is copied (a real copy, never a hardlink; mode and times kept) into a
    staging dir next to the destination while its sha256 and size are checked, then
    fsynced; manifest.json is written last and the staging dir renamed onto the destination.
    The source is left in place; files it holds beyond the manifest are not copied.

    Idempotent: when the destination already holds a completed snapshot with the same files
    (path, sha256, size), returns (manifest, False) without copying; that is decided before
    the source is read when ``manifest`` lists files, so a repeat succeeds after the source
    is deleted. Errors: INVALID_ARGUMENT (``source_uri`` / ``destination_uri``: bad URI, or the
    two overlap), NOT_FOUND (no snapshot at the source), FAILED_PRECONDITION (a source file
    is missing or differs from the manifest: the first mismatch, naming the file; or the
    destination exists holding something else). Runs off the event loop.
    """
    source = store.resolve(source_uri, "source_uri")
    dest = store.resolve(destination_uri, "destination_uri")
    if source == dest or source.is_relative_to(dest) or dest.is_relative_to(source):
        raise invalid(f"destination_uri: {destination_uri!r} ({dest}) overlaps source_uri "
                      f"{source_uri!r} ({source})")

    def present(expected: pb.SnapshotManifest) -> bool:
        """True when dest holds a completed snapshot with ``expected``'s files; False when there
        is nothing at dest; FAILED_PRECONDITION when it holds anything else."""
        if not dest.exists() and not dest.is_symlink():
            return False
        held = store.read_manifest(dest) if dest.is_dir() and not dest.is_symlink() else None
        if held is None:
            raise precondition(f"destination_uri: {destination_uri!r} ({dest}) exists and holds no "
                               f"completed snapshot")
        difference = _first_difference(held, expected)
        if difference:
            raise precondition(f"destination_uri: {destination_uri!r} ({dest}) already holds a different "
                               f"snapshot: {difference}")
        try:
            check_sizes(dest, held)
        except AteletError as exc:
            raise precondition(f"destination_uri: {destination_uri!r} ({dest}) holds a damaged snapshot: "
                               f"{exc.reason}") from None
        return True

    def work() -> tuple[pb.SnapshotManifest, bool]:
        if manifest.files and present(manifest):
            return manifest, False
        expected = store.expected(source, manifest, "source_uri", source_uri)
        try:
            check_sizes(source, expected)
        except AteletError as exc:
            raise AteletError(exc.code, f"source_uri: {source_uri!r}: {exc.reason}") from None
        if present(expected):
            return expected, False
        staging = store.staging_dir(dest)
        try:
            for entry in expected.files:
                try:
                    _copy_checked(source / entry.path, staging / entry.path, entry)
                except AteletError as exc:
                    raise AteletError(exc.code, f"source_uri: {source_uri!r}: {exc.reason}") from None
            write_manifest(staging, expected)
            for directory in sorted((p for p in staging.rglob("*") if p.is_dir()), reverse=True):
                _fsync_dir(directory)
            _fsync_dir(staging)
            if dest.exists() or dest.is_symlink():  # a concurrent copy finished first
                store.discard(staging)
                present(expected)
                return expected, False
            os.rename(staging, dest)
        except BaseException:
            store.discard(staging)
            raise
        _fsync_dir(dest.parent)
        return expected, True

    return await asyncio.to_thread(work)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy_checked(src: Path, dst: Path, entry: pb.SnapshotFile) -> None:
    """Copies ``src`` to the new file ``dst`` (fsynced, mode and times kept), hashing on the way;
    FAILED_PRECONDITION naming ``entry.path`` when the content differs from ``entry``."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    with open(src, "rb") as fin, open(dst, "xb") as fout:
        while chunk := fin.read(1 << 20):
            digest.update(chunk)
            fout.write(chunk)
            size += len(chunk)
        fout.flush()
        os.fsync(fout.fileno())
    if size != entry.size_bytes:
        raise damaged(f"snapshot file {entry.path}: size {size} != manifest {entry.size_bytes}")
    if digest.hexdigest() != entry.sha256:
        raise damaged(f"snapshot file {entry.path}: sha256 {digest.hexdigest()} != manifest {entry.sha256}")
    # Mode and times, as shutil.copy2 keeps them; the content was copied above, never linked.
    shutil.copystat(src, dst)


def _first_difference(held: pb.SnapshotManifest, wanted: pb.SnapshotManifest) -> str:
    """The first file in which two manifests differ (path, sha256, size), '' when they list the same."""
    a = {f.path: (f.sha256, f.size_bytes) for f in held.files}
    b = {f.path: (f.sha256, f.size_bytes) for f in wanted.files}
    for path in sorted(a.keys() | b.keys()):
        if path not in a:
            return f"it lacks file {path}"
        if path not in b:
            return f"it has file {path}, which the manifest does not list"
        if a[path] != b[path]:
            return (f"file {path}: sha256 {a[path][0]} size {a[path][1]} != manifest sha256 {b[path][0]} "
                    f"size {b[path][1]}")
    return ""
