"""Applies the numbered plain-SQL migrations in `migrations/` (NNNN_name.sql), once each, in order."""

from __future__ import annotations

import logging
from pathlib import Path

import asyncpg

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
_LOCK_KEY = 0x617465  # "ate": one migrator at a time across processes


def migration_files() -> list[tuple[int, Path]]:
    """The migrations shipped with this version, as (number, path), in order."""
    found = []
    for path in sorted(MIGRATIONS_DIR.glob("*.sql")):
        number = int(path.name.split("_", 1)[0])
        found.append((number, path))
    return found


async def migrate(connection: asyncpg.Connection) -> tuple[int, int]:
    """Bring the schema up to date.

    Args:
        connection: an open connection; the work runs under an advisory lock so that several
            processes starting at once apply each migration exactly once.

    Returns:
        (version before, version after).
    """
    await connection.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
    try:
        await connection.execute(
            "CREATE TABLE IF NOT EXISTS ate_schema_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        before = await connection.fetchval("SELECT COALESCE(max(version), 0) FROM ate_schema_migrations")
        after = before
        for number, path in migration_files():
            if number <= before:
                continue
            async with connection.transaction():
                await connection.execute(path.read_text())
                await connection.execute(
                    "INSERT INTO ate_schema_migrations (version, name) VALUES ($1, $2)", number, path.name
                )
            after = number
        if after != before:
            log.info("schema migrated from version %d to %d", before, after)
        return before, after
    finally:
        await connection.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
