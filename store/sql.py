"""Loads the named queries of `queries.sql` (blocks headed `-- name --` and a description line)."""

from __future__ import annotations

import re
from pathlib import Path

_HEADER = re.compile(r"^-- ([a-z_]+) --$", re.MULTILINE)


def load_queries(path: Path) -> dict[str, str]:
    """Parse a file of named queries.

    Args:
        path: a SQL file whose blocks start with a line `-- name --`.

    Returns:
        name -> SQL text (comments kept; asyncpg ignores them).

    Raises:
        ValueError: a name appears twice.
    """
    text = path.read_text()
    queries: dict[str, str] = {}
    parts = _HEADER.split(text)
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice in {path}")
        queries[name] = body.strip()
    return queries


QUERIES = load_queries(Path(__file__).with_name("queries.sql"))
"""Every named query of the store."""
