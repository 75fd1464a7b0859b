"""Independent probes of a node: what the durability checks see without asking the product.

Snapshot directories are found from their URI (`file://` in the storage location, `local:///`
under the node's atelet state dir, `<state_dir>/local-snapshots/<path>`, atelet/layout.py) and
every file is hashed here; sandboxes come from `runsc list` on the atelet's runsc root, network
namespaces from `ip netns list`.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from tests.durability.harness import NETNS_PREFIX, NODE, Stack


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def snapshot_dir(stack: Stack, uri: str, node: str | None = None) -> Path:
    """The directory a snapshot URI names: a `file://` path, or for `local:///<path>` the
    directory `<state_dir>/local-snapshots/<path>` of `node`'s atelet (default node `dur`)."""
    parsed = urlsplit(uri)
    path = unquote(parsed.path)
    if parsed.scheme == "local":
        assert path.startswith("/") and not parsed.netloc, uri
        return stack.state_dir(node or NODE) / "local-snapshots" / path.lstrip("/")
    assert parsed.scheme == "file", uri
    return Path(path)


def files_of(directory: Path) -> set[tuple[str, str]]:
    """(path, sha256) of every file of the snapshot at `directory`, hashed here (manifest.json excluded)."""
    return {
        (str(p.relative_to(directory)), sha256_file(p))
        for p in directory.rglob("*")
        if p.is_file() and p.name != "manifest.json"
    }


def verify_snapshot_dir(directory: Path, db_manifest: dict[str, Any] | None) -> None:
    """The directory exists, holds manifest.json, every listed file has its sha256 and size, and
    (when given) the manifest Postgres recorded lists the same files."""
    assert directory.is_dir(), f"snapshot directory {directory} is missing"
    manifest = json.loads((directory / "manifest.json").read_text())
    files = manifest.get("files") or []
    assert files, f"{directory}/manifest.json lists no files"
    for entry in files:
        path = directory / entry["path"]
        assert path.is_file(), f"{path} listed in the manifest is missing"
        assert path.stat().st_size == int(entry.get("size_bytes") or 0), f"{path}: size differs from manifest"
        assert sha256_file(path) == entry["sha256"], f"{path}: sha256 differs from manifest"
    if db_manifest is not None:
        recorded = {(f["path"], f["sha256"]) for f in db_manifest.get("files") or []}
        on_disk = {(f["path"], f["sha256"]) for f in files}
        assert recorded == on_disk, f"the manifest in Postgres is not the one on disk at {directory}"


def runsc_containers(stack: Stack, node: str = NODE) -> list[str]:
    """`runsc list` of `node`'s atelet (its runsc root in its state dir)."""
    root = stack.state_dir(node) / "runsc"
    done = subprocess.run(["runsc", f"--root={root}", "list", "-quiet"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def namespaces(prefix: str = NETNS_PREFIX) -> list[str]:
    """The network namespaces whose name starts with `prefix` (default: node `dur`'s)."""
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return sorted(line.split()[0] for line in done.stdout.splitlines() if line.startswith(prefix))
