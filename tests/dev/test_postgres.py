"""The embedded PostgreSQL helper: start, connect, stop, restart with the data kept."""

import asyncio
from pathlib import Path

import asyncpg

from ate.dev.postgres import EmbeddedPostgres, redact_dsn


async def _run(dsn: str, *queries: str) -> list[object]:
    conn = await asyncpg.connect(dsn)
    try:
        return [await conn.fetchval(q) for q in queries]
    finally:
        await conn.close()


def test_start_stop_restart_keeps_data(tmp_path: Path) -> None:
    pg = EmbeddedPostgres(tmp_path / "data" / "postgres")
    try:
        dsn = pg.start()
        assert "/ate?" in dsn
        assert asyncio.run(_run(dsn, "SELECT 1", "SELECT current_database()")) == [1, "ate"]
        asyncio.run(_run(dsn, "CREATE TABLE kept (v int)", "INSERT INTO kept VALUES (42)"))
        pid = pg.postmaster_pid()
        assert pid and pg.running()

        pg.stop()
        assert not pg.running()
        assert not Path(f"/proc/{pid}").exists() or "postgres" not in Path(f"/proc/{pid}/cmdline").read_text()

        dsn = pg.start()
        assert asyncio.run(_run(dsn, "SELECT v FROM kept")) == [42]
    finally:
        pg.stop()
    assert not pg.running()


def test_redact_dsn() -> None:
    assert redact_dsn("postgresql://ate:secret@db:5432/ate") == "postgresql://ate:***@db:5432/ate"
    assert redact_dsn("postgresql://postgres:@/ate?host=/tmp/x") == "postgresql://postgres:@/ate?host=/tmp/x"
