"""Where snapshots go and with which scope: the URI of each generation, and the template's
onCommit / onPause scopes."""

import hashlib
from typing import Any

from domain.states import SnapshotScope

LOCAL_LOCATION = "local://"
"""Storage location of LOCAL snapshots: the atelet maps `local:///<path>` into its own
local-snapshot directory, so the control plane never needs a node's file layout."""


def commit_scope_of(spec: dict[str, Any]) -> SnapshotScope:
    """The snapshot scope a suspend writes: the template's snapshotConfig.onCommit (default FULL)."""
    value = str((spec.get("snapshotConfig") or {}).get("onCommit") or "Full")
    return SnapshotScope(value.upper())


def pause_scope_of(spec: dict[str, Any]) -> SnapshotScope:
    """The snapshot scope a pause writes: the template's snapshotConfig.onPause (default FULL)."""
    value = str((spec.get("snapshotConfig") or {}).get("onPause") or "Full")
    return SnapshotScope(value.upper())


def snapshot_uri(location: str, owner: str, generation: int, operation_id: str) -> str:
    """Where a snapshot is stored: `<location>/<atespace>/<owner kind>s/<name>/<gen>-<op12>`
    (LOCAL ones: `local:///<atespace>/actors/<name>/<gen>-<op12>` on their node).

    The operation suffix (a digest of the operation ID) makes each attempt's destination
    unique, so a crashed earlier attempt can never be mistaken for this one's data.
    """
    kind, atespace, name = owner.split("/", 2)
    # Run IDs are UUIDv7: their first characters are a timestamp shared by runs started close
    # together, so the suffix is a digest of the whole ID.
    suffix = hashlib.sha256(operation_id.encode()).hexdigest()[:12]
    base = "local://" if location == LOCAL_LOCATION else location.rstrip("/")
    return f"{base}/{atespace}/{kind}s/{name}/{generation}-{suffix}"
