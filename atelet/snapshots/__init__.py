"""The node's snapshot store for ``file://`` and ``local:`` URIs.

- ``manifest``: what a snapshot directory holds (manifest.json, checkpoint/, volumes/) and the
  checks of its files against a manifest;
- ``uris``: which directory a URI names, and the roots it must lie in;
- ``volumes``: durable dirs into and out of ``volumes/<name>.tar``;
- ``store``: ``SnapshotStore``: write (staging, finalize), read, verify, delete;
- ``copy``: ``SnapshotStore.copy``, a completed snapshot to another URI.

The names other packages use are re-exported here.
"""

from atelet.snapshots.manifest import CHECKPOINT_DIR, MANIFEST, VOLUMES_DIR, manifest_from_json, manifest_to_json
from atelet.snapshots.store import SnapshotStore
from atelet.snapshots.uris import SnapshotRootError
from atelet.snapshots.volumes import archive_dir, extract_dir

__all__ = [
    "CHECKPOINT_DIR",
    "MANIFEST",
    "VOLUMES_DIR",
    "SnapshotRootError",
    "SnapshotStore",
    "archive_dir",
    "extract_dir",
    "manifest_from_json",
    "manifest_to_json",
]
