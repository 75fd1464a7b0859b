"""The node's snapshot store for ``file://`` URIs.

A snapshot is a directory::

    <uri path>/
      manifest.json          SnapshotManifest as JSON (proto field names)
      checkpoint/...         runsc checkpoint image files (scope FULL only)
      volumes/<name>.tar     one tar per durable-dir volume (every scope)

URIs must be ``file://`` with an absolute path that, after following symlinks, lies strictly
inside one of the snapshot roots; ``..`` segments are refused outright. Violations raise
INVALID_ARGUMENT naming the field, before anything is written.

Writing: the caller fills a staging dir next to the destination (same filesystem); ``finalize``
hashes every file (sha256, size), writes ``manifest.json`` last and renames the staging dir onto
the destination, so a crash never leaves a half snapshot at the final URI.
Deleting: ``delete`` removes a snapshot directory (symlinks inside it are removed, never followed),
staging leftovers of the same destination, and then the parent directories that became empty, up
to but not including the snapshot root.
Reading: ``verify`` checks the files against the manifest it is given (sha256, size, sandbox
class, runsc version for FULL) and raises FAILED_PRECONDITION with the first mismatch.
"""

from __future__ import annotations

import asyncio
import glob
import hashlib
import os
import shutil
import tarfile
import uuid
from pathlib import Path
from urllib.parse import unquote, urlparse

from google.protobuf import json_format

from atelet.errors import internal, invalid, not_found, precondition
from atelet.proto import atelet_pb2 as pb

MANIFEST = "manifest.json"
CHECKPOINT_DIR = "checkpoint"
VOLUMES_DIR = "volumes"
STAGING_PREFIX = ".ate-staging-"
SANDBOX_CLASS = "gvisor"


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's content."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def manifest_to_json(manifest: pb.SnapshotManifest) -> str:
    """JSON text of a manifest, proto field names, enums by name."""
    return json_format.MessageToJson(manifest, preserving_proto_field_name=True, indent=1)


def manifest_from_json(text: str) -> pb.SnapshotManifest:
    """Parses ``manifest_to_json`` output."""
    return json_format.Parse(text, pb.SnapshotManifest())


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


class SnapshotStore:
    """Snapshot directories under ``roots`` (made absolute and symlink-free at construction)."""

    def __init__(self, roots: list[Path]) -> None:
        self.roots = [Path(r).resolve() for r in roots]

    def resolve(self, uri: str, field: str = "snapshot_uri") -> Path:
        """The directory ``uri`` names; INVALID_ARGUMENT naming ``field`` unless it lies in a root."""
        parsed = urlparse(uri)
        if parsed.scheme != "file":
            raise invalid(f"{field}: {uri!r}: only file:// snapshot URIs are supported on this node")
        if parsed.netloc not in ("", "localhost") or parsed.query or parsed.fragment:
            raise invalid(f"{field}: {uri!r}: must be file:///<absolute path>")
        path = Path(unquote(parsed.path))
        if not path.is_absolute():
            raise invalid(f"{field}: {uri!r}: the path must be absolute")
        if ".." in path.parts:
            raise invalid(f"{field}: {uri!r}: '..' is not allowed")
        resolved = path.resolve()
        if not any(resolved != root and resolved.is_relative_to(root) for root in self.roots):
            raise invalid(f"{field}: {uri!r} resolves to {resolved}, outside the snapshot roots "
                          f"{[str(r) for r in self.roots]}")
        return resolved

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
        return sum(f.size_bytes for f in manifest.files)

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
        root = next(r for r in self.roots if dest != r and dest.is_relative_to(r))
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

    @staticmethod
    def discard(staging: Path) -> None:
        """Removes a staging dir (after a failure)."""
        shutil.rmtree(staging, ignore_errors=True)

    async def finalize(self, staging: Path, dest: Path, manifest: pb.SnapshotManifest) -> pb.SnapshotManifest:
        """Hashes the staged files into ``manifest.files``, writes manifest.json, renames onto ``dest``.

        FAILED_PRECONDITION when ``dest`` appeared meanwhile (the staging dir is then removed).
        """
        def work() -> pb.SnapshotManifest:
            del manifest.files[:]
            for path in sorted(p for p in staging.rglob("*") if p.is_file()):
                rel = path.relative_to(staging).as_posix()
                if rel == MANIFEST:
                    continue
                manifest.files.add(path=rel, sha256=sha256_file(path), size_bytes=path.stat().st_size)
            tmp = staging / (MANIFEST + ".tmp")
            tmp.write_text(manifest_to_json(manifest))
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, staging / MANIFEST)
            if dest.exists():
                raise precondition(f"snapshot_uri: {dest} already exists")
            os.rename(staging, dest)
            return manifest

        try:
            return await asyncio.to_thread(work)
        except BaseException:
            self.discard(staging)
            raise

    async def verify(self, dest: Path, manifest: pb.SnapshotManifest, runsc_version: str) -> pb.SnapshotManifest:
        """Checks the snapshot at ``dest`` against ``manifest`` (or, when it lists no files, against
        the stored manifest.json). Returns the manifest used. NOT_FOUND when there is no snapshot,
        FAILED_PRECONDITION on any mismatch."""
        if not dest.is_dir():
            raise not_found(f"snapshot_uri: no snapshot at {dest}")
        if not manifest.files:
            stored = self.read_manifest(dest)
            if stored is None:
                raise not_found(f"snapshot_uri: {dest} holds no completed snapshot (no {MANIFEST})")
            if manifest.scope and manifest.scope != stored.scope:
                raise precondition(f"manifest.scope: request says {pb.SnapshotScope.Name(manifest.scope)}, "
                                   f"snapshot is {pb.SnapshotScope.Name(stored.scope)}")
            manifest = stored
        if manifest.sandbox_class != SANDBOX_CLASS:
            raise precondition(f"manifest.sandbox_class: snapshot is {manifest.sandbox_class!r}, "
                               f"this node runs {SANDBOX_CLASS!r}")
        if manifest.scope not in (pb.SNAPSHOT_SCOPE_FULL, pb.SNAPSHOT_SCOPE_DATA):
            raise precondition("manifest.scope: must be FULL or DATA")
        if manifest.scope == pb.SNAPSHOT_SCOPE_FULL and manifest.runsc_version != runsc_version:
            raise precondition(f"manifest.runsc_version: snapshot was written by runsc {manifest.runsc_version!r}, "
                               f"this node has {runsc_version!r}; a checkpoint restores only with its own build")

        def check() -> None:
            for entry in manifest.files:
                rel = Path(entry.path)
                if rel.is_absolute() or ".." in rel.parts:
                    raise precondition(f"manifest.files: bad path {entry.path!r}")
                path = dest / rel
                if not path.is_file():
                    raise precondition(f"snapshot file {entry.path} is missing at {dest}")
                size = path.stat().st_size
                if size != entry.size_bytes:
                    raise precondition(f"snapshot file {entry.path}: size {size} != manifest {entry.size_bytes}")
                digest = sha256_file(path)
                if digest != entry.sha256:
                    raise precondition(f"snapshot file {entry.path}: sha256 {digest} != manifest {entry.sha256}")

        await asyncio.to_thread(check)
        return manifest
