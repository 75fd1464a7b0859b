"""The node's snapshot store for ``file://`` and ``local:`` URIs.

A snapshot is a directory::

    <uri path>/
      manifest.json          SnapshotManifest as JSON (proto field names)
      checkpoint/...         runsc checkpoint image files (scope FULL only)
      volumes/<name>.tar     one tar per durable-dir volume (every scope)

Two kinds of URI name such a directory:

- ``file:///<absolute path>``: the storage location. After following symlinks the path must lie
  strictly inside one of the snapshot roots, and not inside the local snapshot root unless that
  root is itself one of the snapshot roots.
- ``local:///<relative path>`` (e.g. ``local:///actor/demo/c1/3``): a LOCAL snapshot on this
  node's own disk, ``<local root>/<relative path>``; after following symlinks it must lie strictly
  inside the local snapshot root.

Either way ``..`` segments, a host, a query or a fragment are refused outright. Violations raise
INVALID_ARGUMENT naming the field, before anything is written.

Writing: the caller fills a staging dir next to the destination (same filesystem); ``finalize``
hashes every file (sha256, size), writes ``manifest.json`` last and renames the staging dir onto
the destination, so a crash never leaves a half snapshot at the final URI.
Copying: ``copy`` copies a completed snapshot (typically local) to another URI (typically the
storage location) the same way: staged next to the destination, each file hashed while copied and
checked against the manifest, renamed into place with its manifest.
Deleting: ``delete`` removes a snapshot directory (symlinks inside it are removed, never followed),
staging leftovers of the same destination, and then the parent directories that became empty, up
to but not including the snapshot root (or the local root).
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
from pathlib import Path, PurePosixPath
from urllib.parse import ParseResult, unquote, urlparse

from google.protobuf import json_format

from atelet.errors import AteletError, internal, invalid, not_found, precondition
from atelet.proto import atelet_pb2 as pb

MANIFEST = "manifest.json"
LOCAL_SCHEME = "local"
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


class SnapshotRootError(ValueError):
    """The configured roots overlap in a way that would let one kind of URI reach the other's files."""


class SnapshotStore:
    """Snapshot directories under ``roots`` (``file://``) and ``local_root`` (``local:``), all made
    absolute and symlink-free at construction.

    ``local_root`` None: ``local:`` URIs are refused. SnapshotRootError (a ValueError) when
    ``local_root`` contains one of ``roots`` (``local:`` URIs could then reach into the storage
    location).
    """

    def __init__(self, roots: list[Path], local_root: Path | None = None) -> None:
        self.roots = [Path(r).resolve() for r in roots]
        self.local_root = Path(local_root).resolve() if local_root is not None else None
        if self.local_root is not None:
            for root in self.roots:
                if root != self.local_root and root.is_relative_to(self.local_root):
                    raise SnapshotRootError(f"the local snapshot root {self.local_root} contains the snapshot "
                                            f"root {root}; keep them apart (or make them the same directory)")

    def resolve(self, uri: str, field: str = "snapshot_uri") -> Path:
        """The directory ``uri`` names; INVALID_ARGUMENT naming ``field`` unless it lies in a root.

        ``file:///<absolute path>`` must lie in a snapshot root (not in the local root unless that
        is listed among the snapshot roots); ``local:///<path>`` in the local snapshot root.
        """
        parsed = urlparse(uri)
        if "\0" in uri:
            raise invalid(f"{field}: {uri!r}: NUL is not allowed")
        if parsed.scheme == LOCAL_SCHEME:
            return self._resolve_local(uri, parsed, field)
        if parsed.scheme != "file":
            raise invalid(f"{field}: {uri!r}: only file:// and local:/// snapshot URIs are supported on this node")
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
        local = self.local_root
        if local is not None and local not in self.roots and resolved.is_relative_to(local):
            raise invalid(f"{field}: {uri!r} resolves to {resolved}, inside the node's local snapshot root "
                          f"{local}: name a local snapshot as local:///<path>")
        return resolved

    def _resolve_local(self, uri: str, parsed: ParseResult, field: str) -> Path:
        root = self.local_root
        if root is None:
            raise invalid(f"{field}: {uri!r}: this node has no local snapshot root")
        if parsed.netloc or parsed.query or parsed.fragment or parsed.params:
            raise invalid(f"{field}: {uri!r}: must be local:///<path inside the node's local snapshot root>")
        path = PurePosixPath(unquote(parsed.path))
        if not path.is_absolute():
            raise invalid(f"{field}: {uri!r}: must be local:///<path inside the node's local snapshot root>")
        if ".." in path.parts:
            raise invalid(f"{field}: {uri!r}: '..' is not allowed")
        resolved = (root / path.relative_to("/")).resolve()
        if resolved == root or not resolved.is_relative_to(root):
            raise invalid(f"{field}: {uri!r} resolves to {resolved}, not strictly inside the local snapshot "
                          f"root {root}")
        return resolved

    def is_local(self, dest: Path) -> bool:
        """True when ``dest`` (a path from ``resolve``) lies in the local snapshot root."""
        return self.local_root is not None and dest != self.local_root and dest.is_relative_to(self.local_root)

    def root_of(self, dest: Path) -> Path:
        """The innermost root (snapshot roots and local root) strictly containing ``dest``, a path
        from ``resolve``; INVALID_ARGUMENT when there is none."""
        roots = [*self.roots, *([self.local_root] if self.local_root is not None else [])]
        holding = [r for r in roots if dest != r and dest.is_relative_to(r)]
        if not holding:
            raise invalid(f"snapshot_uri: {dest} is in no snapshot root")
        return max(holding, key=lambda r: len(r.parts))

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

    def remove_local_staging(self) -> list[Path]:
        """Removes the staging dirs left in the local root by a previous atelet process (a checkpoint
        or copy it never finished); completed snapshots are not descended into. Returns what was
        removed. Only for the local root: nothing else writes there, unlike a shared storage
        location. Blocking; call before serving."""
        removed: list[Path] = []
        if self.local_root is None or not self.local_root.is_dir():
            return removed
        for dirpath, dirnames, filenames in os.walk(self.local_root):
            if MANIFEST in filenames:  # a completed snapshot: nothing to clean inside
                dirnames.clear()
                continue
            for name in list(dirnames):
                if name.startswith(STAGING_PREFIX):
                    dirnames.remove(name)
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
            del manifest.files[:]
            for path in sorted(p for p in staging.rglob("*") if p.is_file()):
                rel = path.relative_to(staging).as_posix()
                if rel == MANIFEST:
                    continue
                manifest.files.add(path=rel, sha256=sha256_file(path), size_bytes=path.stat().st_size)
            _write_manifest(staging, manifest)
            if dest.exists():
                raise precondition(f"snapshot_uri: {dest} already exists")
            os.rename(staging, dest)
            return manifest

        try:
            return await asyncio.to_thread(work)
        except BaseException:
            self.discard(staging)
            raise

    def _expected(self, dest: Path, manifest: pb.SnapshotManifest, field: str, uri: str = "") -> pb.SnapshotManifest:
        """``manifest``, or when it lists no files the stored manifest.json of the snapshot at
        ``dest``; NOT_FOUND when there is no snapshot, FAILED_PRECONDITION on a scope mismatch."""
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

    async def verify(self, dest: Path, manifest: pb.SnapshotManifest, runsc_version: str) -> pb.SnapshotManifest:
        """Checks the snapshot at ``dest`` against ``manifest`` (or, when it lists no files, against
        the stored manifest.json). Returns the manifest used. NOT_FOUND when there is no snapshot,
        FAILED_PRECONDITION on any mismatch."""
        manifest = self._expected(dest, manifest, "snapshot_uri")
        if manifest.sandbox_class != SANDBOX_CLASS:
            raise precondition(f"manifest.sandbox_class: snapshot is {manifest.sandbox_class!r}, "
                               f"this node runs {SANDBOX_CLASS!r}")
        if manifest.scope not in (pb.SNAPSHOT_SCOPE_FULL, pb.SNAPSHOT_SCOPE_DATA):
            raise precondition("manifest.scope: must be FULL or DATA")
        if manifest.scope == pb.SNAPSHOT_SCOPE_FULL and manifest.runsc_version != runsc_version:
            raise precondition(f"manifest.runsc_version: snapshot was written by runsc {manifest.runsc_version!r}, "
                               f"this node has {runsc_version!r}; a checkpoint restores only with its own build")

        def check() -> None:
            _check_sizes(dest, manifest)
            for entry in manifest.files:
                digest = sha256_file(dest / entry.path)
                if digest != entry.sha256:
                    raise precondition(f"snapshot file {entry.path}: sha256 {digest} != manifest {entry.sha256}")

        await asyncio.to_thread(check)
        return manifest

    async def copy(self, source_uri: str, destination_uri: str,
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
        source = self.resolve(source_uri, "source_uri")
        dest = self.resolve(destination_uri, "destination_uri")
        if source == dest or source.is_relative_to(dest) or dest.is_relative_to(source):
            raise invalid(f"destination_uri: {destination_uri!r} ({dest}) overlaps source_uri "
                          f"{source_uri!r} ({source})")

        def present(expected: pb.SnapshotManifest) -> bool:
            """True when dest holds a completed snapshot with ``expected``'s files; False when there
            is nothing at dest; FAILED_PRECONDITION when it holds anything else."""
            if not dest.exists() and not dest.is_symlink():
                return False
            held = self.read_manifest(dest) if dest.is_dir() and not dest.is_symlink() else None
            if held is None:
                raise precondition(f"destination_uri: {destination_uri!r} ({dest}) exists and holds no "
                                   f"completed snapshot")
            difference = _first_difference(held, expected)
            if difference:
                raise precondition(f"destination_uri: {destination_uri!r} ({dest}) already holds a different "
                                   f"snapshot: {difference}")
            try:
                _check_sizes(dest, held)
            except AteletError as exc:
                raise precondition(f"destination_uri: {destination_uri!r} ({dest}) holds a damaged snapshot: "
                                   f"{exc.reason}") from None
            return True

        def work() -> tuple[pb.SnapshotManifest, bool]:
            if manifest.files and present(manifest):
                return manifest, False
            expected = self._expected(source, manifest, "source_uri", source_uri)
            try:
                _check_sizes(source, expected)
            except AteletError as exc:
                raise precondition(f"source_uri: {source_uri!r}: {exc.reason}") from None
            if present(expected):
                return expected, False
            staging = self.staging_dir(dest)
            try:
                for entry in expected.files:
                    try:
                        _copy_checked(source / entry.path, staging / entry.path, entry)
                    except AteletError as exc:
                        raise precondition(f"source_uri: {source_uri!r}: {exc.reason}") from None
                _write_manifest(staging, expected)
                for directory in sorted((p for p in staging.rglob("*") if p.is_dir()), reverse=True):
                    _fsync_dir(directory)
                _fsync_dir(staging)
                if dest.exists() or dest.is_symlink():  # a concurrent copy finished first
                    self.discard(staging)
                    present(expected)
                    return expected, False
                os.rename(staging, dest)
            except BaseException:
                self.discard(staging)
                raise
            _fsync_dir(dest.parent)
            return expected, True

        return await asyncio.to_thread(work)


def _write_manifest(directory: Path, manifest: pb.SnapshotManifest) -> None:
    """Writes ``directory/manifest.json`` durably (temp file, fsync, rename)."""
    tmp = directory / (MANIFEST + ".tmp")
    tmp.write_text(manifest_to_json(manifest))
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, directory / MANIFEST)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_sizes(dest: Path, manifest: pb.SnapshotManifest) -> None:
    """Every file of ``manifest`` is a regular file inside ``dest`` (no symlink out of it) of the
    listed size; FAILED_PRECONDITION naming the first that is not. Blocking, reads no content."""
    for entry in manifest.files:
        rel = Path(entry.path)
        if not entry.path or rel.is_absolute() or ".." in rel.parts:
            raise precondition(f"manifest.files: bad path {entry.path!r}")
        path = dest / rel
        if not path.is_file():
            raise precondition(f"snapshot file {entry.path} is missing at {dest}")
        if not path.resolve().is_relative_to(dest):
            raise precondition(f"snapshot file {entry.path} at {dest} leads outside the snapshot")
        size = path.stat().st_size
        if size != entry.size_bytes:
            raise precondition(f"snapshot file {entry.path}: size {size} != manifest {entry.size_bytes}")


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
        raise precondition(f"snapshot file {entry.path}: size {size} != manifest {entry.size_bytes}")
    if digest.hexdigest() != entry.sha256:
        raise precondition(f"snapshot file {entry.path}: sha256 {digest.hexdigest()} != manifest {entry.sha256}")
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
