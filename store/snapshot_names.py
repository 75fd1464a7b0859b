"""Where snapshots go: the URI of each generation of an owner."""

import hashlib

LOCAL_LOCATION = "local://"
"""Storage location of LOCAL snapshots: the atelet maps `local:///<path>` into its own
local-snapshot directory, so the control plane never needs a node's file layout."""


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
