"""Which directory a snapshot URI names, and the roots it must lie in.

Two kinds of URI name a snapshot directory:

- ``file:///<absolute path>``: the storage location. After following symlinks the path must lie
  strictly inside one of the snapshot roots, and not inside the local snapshot root unless that
  root is itself one of the snapshot roots.
- ``local:///<relative path>`` (e.g. ``local:///actor/demo/c1/3``): a LOCAL snapshot on this
  node's own disk, ``<local root>/<relative path>``; after following symlinks it must lie strictly
  inside the local snapshot root.

Either way ``..`` segments, a host, a query or a fragment are refused outright. Violations raise
INVALID_ARGUMENT naming the field, before anything is written.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from urllib.parse import ParseResult, unquote, urlparse

from atelet.errors import invalid

LOCAL_SCHEME = "local"


class SnapshotRootError(ValueError):
    """The configured roots overlap in a way that would let one kind of URI reach the other's files."""


class SnapshotRoots:
    """The snapshot roots (``file://``) and the local root (``local:``), all made absolute and
    symlink-free at construction.

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
