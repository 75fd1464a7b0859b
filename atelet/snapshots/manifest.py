"""What a snapshot directory holds (manifest.json and the files it lists), and the checks of those files.

A snapshot is a directory::

    <uri path>/
      manifest.json          SnapshotManifest as JSON (proto field names)
      checkpoint/...         runsc checkpoint image files (scope FULL only)
      volumes/<name>.tar     one tar per durable-dir volume (every scope)

``manifest.json`` lists every other file with its sha256 and size; it is written last
(``write_manifest``), so a directory that has one is a completed snapshot.
"""

from __future__ import annotations

import os
from pathlib import Path

from google.protobuf import json_format

from atelet.errors import damaged, precondition
from atelet.proto import atelet_pb2 as pb
from atelet.snapshots.digests import DIGESTS

MANIFEST = "manifest.json"
CHECKPOINT_DIR = "checkpoint"
VOLUMES_DIR = "volumes"
OUTPUT_FILE = "output.log"
"""In a FULL snapshot: the newest ``OUTPUT_BYTES`` of what the saved sandbox had printed. A sandbox
restored from another actor's snapshot (a template's golden snapshot) inherits it: its process
printed those lines before the save (``atelet.output.inherit``)."""
OUTPUT_BYTES = 64 * 1024


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's content (remembered while the file is unchanged:
    atelet.snapshots.digests). Blocking."""
    return DIGESTS.sha256(path)


def manifest_to_json(manifest: pb.SnapshotManifest) -> str:
    """JSON text of a manifest, proto field names, enums by name."""
    return json_format.MessageToJson(manifest, preserving_proto_field_name=True, indent=1)


def manifest_from_json(text: str) -> pb.SnapshotManifest:
    """Parses ``manifest_to_json`` output."""
    return json_format.Parse(text, pb.SnapshotManifest())


def size_of(manifest: pb.SnapshotManifest) -> int:
    """Total bytes of the manifest's files."""
    return sum(f.size_bytes for f in manifest.files)


def hash_into(directory: Path, manifest: pb.SnapshotManifest) -> None:
    """List every file under ``directory`` (but manifest.json) with its sha256 and size in
    ``manifest.files``, replacing what was there. Blocking."""
    del manifest.files[:]
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory).as_posix()
        if rel != MANIFEST:
            digest = DIGESTS.sha256(path, settle=True)  # the restore that follows will not read it again
            manifest.files.add(path=rel, sha256=digest, size_bytes=path.stat().st_size)


def write_manifest(directory: Path, manifest: pb.SnapshotManifest) -> None:
    """Writes ``directory/manifest.json`` durably (temp file, fsync, rename)."""
    tmp = directory / (MANIFEST + ".tmp")
    tmp.write_text(manifest_to_json(manifest))
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, directory / MANIFEST)


def check_sizes(dest: Path, manifest: pb.SnapshotManifest) -> None:
    """Every file of ``manifest`` is a regular file inside ``dest`` (no symlink out of it) of the
    listed size; DATA_LOSS naming the first that is not (FAILED_PRECONDITION for a bad path in the
    manifest). Blocking, reads no content."""
    for entry in manifest.files:
        rel = Path(entry.path)
        if not entry.path or rel.is_absolute() or ".." in rel.parts:
            raise precondition(f"manifest.files: bad path {entry.path!r}")
        path = dest / rel
        if not path.is_file():
            raise damaged(f"snapshot file {entry.path} is missing at {dest}")
        if not path.resolve().is_relative_to(dest):
            raise damaged(f"snapshot file {entry.path} at {dest} leads outside the snapshot")
        size = path.stat().st_size
        if size != entry.size_bytes:
            raise damaged(f"snapshot file {entry.path}: size {size} != manifest {entry.size_bytes}")
