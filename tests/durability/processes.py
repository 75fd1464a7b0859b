"""The processes a durability Stack is made of, each killable with SIGKILL and restartable.

`Part`: one child process (the Temporal dev server, the api-server, the worker, an atelet),
started again with the same command line, its output appended to one log file. `Postgres`: the
embedded server (killable: the postmaster and every backend), or an external one given by
ATE_DATABASE_URL with a fresh database of our own (not killable). `fetch` and `execute` run SQL
on a DSN with a connection of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
import psutil

from ate.dev.postgres import EmbeddedPostgres

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 60.0


def _pdeathsig() -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


@dataclass
class Part:
    """One process of the stack, started and restarted with the same command line."""

    name: str
    argv: list[str]
    log_path: Path
    ready: Callable[[Part], bool]
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    log_start: int = 0

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            log.write(f"=== {time.strftime('%H:%M:%S')} starting {self.name}\n".encode())
            log.flush()
            self.log_start = log.tell()
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=REPO,
                start_new_session=True,
                preexec_fn=_pdeathsig,
            )

    def log_text(self) -> str:
        with self.log_path.open("rb") as f:
            f.seek(self.log_start)
            return f.read().decode("utf-8", "replace")

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready(self):
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.process.returncode}):\n{self.log_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not ready within {timeout} s:\n{self.log_text()[-3000:]}")
            time.sleep(0.1)

    def sigkill(self) -> None:
        """SIGKILL the process itself (not its children: a crash, not a pod deletion)."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        """SIGTERM its session, SIGKILL it after 30 s."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


def log_line(text: str) -> Callable[[Part], bool]:
    """Readiness: `text` appeared in the part's log since its last start."""
    return lambda part: text in part.log_text()


def http_ok(url: str) -> Callable[[Part], bool]:
    """Readiness: GET `url` answers 200."""

    def check(_part: Part) -> bool:
        try:
            return httpx.get(url, timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    return check


class Postgres:
    """The embedded server (killable), or an external one (not killable) with a fresh database."""

    def __init__(self, pgdata: Path) -> None:
        self.pgdata = pgdata
        self.external = os.environ.get("ATE_DATABASE_URL")
        self.server: EmbeddedPostgres | None = None
        self.dsn = ""
        self._database = ""

    def start(self) -> None:
        if self.external:
            if not self.dsn:
                self._database = f"ate_dur_{uuid.uuid4().hex[:10]}"
                asyncio.run(execute(self.external, f'CREATE DATABASE "{self._database}"'))
                self.dsn = urlunsplit(urlsplit(self.external)._replace(path=f"/{self._database}"))
            return
        self.server = EmbeddedPostgres(self.pgdata)
        self.dsn = self.server.start()
        try:
            asyncio.run(execute(self.dsn, "SELECT 1"))
        except (OSError, asyncpg.PostgresError) as error:
            log = self.server.log_path
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
            raise AssertionError(f"PostgreSQL did not come back on {self.dsn}: {error!r}; its log ends:\n{tail}") from error

    def answers(self) -> bool:
        """Whether the server takes a connection and a query now."""
        try:
            asyncio.run(asyncio.wait_for(execute(self.dsn, "SELECT 1"), 10))
        except (OSError, asyncpg.PostgresError, TimeoutError):
            return False
        return True

    def sigkill(self) -> None:
        """SIGKILL the postmaster and every backend (a machine crash as far as the data goes).

        The killed postmaster's `postmaster.pid` is removed once every process is gone: its PID
        may outlive it as a zombie not yet reaped by whoever adopted it, or be taken by a new
        process on a busy machine, and either would make the next start adopt a server that is
        not there (as a machine's reboot, which empties the process table, would not)."""
        assert self.server is not None, "an external Postgres cannot be killed by this harness"
        pid = self.server.postmaster_pid()
        assert pid is not None
        self.server._forget()
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        _, alive = psutil.wait_procs(procs, timeout=10)
        for p in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                status = p.status()
                assert status == psutil.STATUS_ZOMBIE, f"PostgreSQL process {p.pid} outlived SIGKILL ({status})"
        (self.pgdata / "postmaster.pid").unlink(missing_ok=True)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        elif self.external and self._database:
            with contextlib.suppress(Exception):
                asyncio.run(execute(self.external, f'DROP DATABASE "{self._database}" WITH (FORCE)'))


async def execute(dsn: str, sql: str) -> None:
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


async def fetch(dsn: str, sql: str, *args: Any) -> list[dict[str, Any]]:
    connection = await asyncpg.connect(dsn, timeout=10)
    try:
        await connection.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
        return [dict(r) for r in await connection.fetch(sql, *args)]
    finally:
        await connection.close()
