"""Snapshot storage locations: where a template's snapshots live (`snapshotConfig.storageLocation`).

`file:///<absolute path>` (a directory every node sees: one machine, or a shared filesystem), or
object storage: `s3://<bucket>/<prefix>`, `gs://<bucket>/<prefix>`, `az://<container>/<prefix>`.
Credentials never appear in a location: the nodes take them from their environment.
"""

from __future__ import annotations

from urllib.parse import unquote, urlparse

OBJECT_STORAGE_SCHEMES = ("s3", "gs", "az")

FORMS = "file:///<absolute path>, s3://<bucket>/<prefix>, gs://<bucket>/<prefix> or az://<container>/<prefix>"


def check_storage_location(value: str) -> str:
    """Validate a storage location and return it without a trailing slash.

    Raises:
        ValueError: not one of FORMS, or it carries credentials, a port, a query, control
            characters, or '..' or '.' segments (also percent-encoded: nodes decode the path).
    """
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError("must not contain control characters")
    parsed = urlparse(value)
    parts = [unquote(p) for p in parsed.path.split("/") if p]
    if ".." in parts or "." in parts or any("/" in p for p in parts):
        raise ValueError("must not contain '..' or '.' segments (nor percent-encoded ones, or an encoded '/')")
    if parsed.query or parsed.fragment or parsed.params:
        raise ValueError(f"must be {FORMS}, without a query or fragment")
    if parsed.scheme == "file":
        if parsed.netloc or not value.startswith("file:///"):
            raise ValueError(f"a file location must be file:///<absolute path> (one of {FORMS})")
        return value.rstrip("/")
    if parsed.scheme in OBJECT_STORAGE_SCHEMES:
        if not parsed.netloc:
            raise ValueError(f"names no bucket (one of {FORMS})")
        if "@" in parsed.netloc or ":" in parsed.netloc:
            raise ValueError("must not carry credentials or a port: nodes take credentials from their environment")
        return value.rstrip("/")
    raise ValueError(f"must be {FORMS}")


def is_within(location: str, root: str) -> bool:
    """Whether `location` is `root` or lies below it (both checked, without trailing slashes)."""
    return location == root or location.startswith(root + "/")
