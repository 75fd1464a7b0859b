"""Shared fixtures: a real PostgreSQL server (embedded, or ATE_DATABASE_URL) and a database per test."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from ate.dev.child import ChildFailed
from ate.dev.object_store import LocalObjectStore, free_base_port
from ate.dev.temporal import dev_server_child
from store import Store, migrate


def pytest_configure(config: pytest.Config) -> None:
    """No test reads or writes the user's own ate config (`ate dev` writes a context there), and
    no test's egress proxy asks a DNS server off this machine."""
    import tempfile

    os.environ["ATE_CONFIG"] = str(Path(tempfile.mkdtemp(prefix="ate-config-")) / "config.yaml")
    # Every egress proxy a test starts (its own atelet, or one of an `ate dev`, which inherits this)
    # asks its DNS questions of loopback, where nothing answers: no test sends a packet off this
    # machine, even should Squid look a name up that no hosts file knows.
    os.environ.setdefault("ATE_ATELET_EGRESS_DNS_NAMESERVERS", '["127.0.0.1"]')
    # Every api-server a test starts takes template images from registries on loopback only: a
    # reference to any other (schemathesis makes many) is refused before a registry is asked.
    os.environ.setdefault("ATE_ALLOWED_REGISTRIES", '["127.0.0.1", "localhost", "::1"]')


STACK_LOG_LINES = 25
"""How many last lines of each process's log a failed test of a whole stack shows."""


def _stack_logs(item: pytest.Item) -> Path | None:
    """The log dir of the stack (e2e or durability) a test uses, if any."""
    for value in getattr(item, "funcargs", {}).values():
        logs = getattr(value, "logs", None)
        if logs is None and isinstance(getattr(value, "data_dir", None), Path):
            logs = value.data_dir / "logs"
        if isinstance(logs, Path) and logs.is_dir():
            return logs
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test of a whole stack shows the last lines of each of its processes' logs (the
    Temporal server's aside): a CI run's output is all there is to read of that machine."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if not report.failed:
        return
    logs = _stack_logs(item)
    if logs is None:
        return
    for log in sorted(logs.glob("*.log")):
        if log.name.startswith("temporal"):
            continue
        try:
            lines = log.read_text(errors="replace").splitlines()[-STACK_LOG_LINES:]
        except OSError:
            continue
        report.sections.append((f"last lines of {log.name}", "\n".join(line[:400] for line in lines)))


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """An admin URL of a real PostgreSQL server for the whole session."""
    given = os.environ.get("ATE_DATABASE_URL")
    if given:
        yield given
        return
    from ate.dev.postgres import EmbeddedPostgres

    # Not under pytest's basetemp: any other pytest run started meanwhile (CI and an inner loop
    # on one machine) re-chmods /tmp/pytest-of-root to 0700, and the server, running as the
    # embedded_postgres system user, then PANICs on its own data dir (seen on 2026-12-02).
    base = Path(tempfile.mkdtemp(prefix="ate-pg-", dir="/tmp"))
    base.chmod(0o755)
    server = EmbeddedPostgres(base / "data", database="postgres")
    url = server.start()
    try:
        yield url
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def _with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


@contextlib.asynccontextmanager
async def fresh_database(postgres_url: str) -> AsyncIterator[str]:
    """A new, migrated database on the server at `postgres_url`; its URL, dropped afterwards."""
    name = f"ate_test_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(postgres_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    url = _with_database(postgres_url, name)
    connection = await asyncpg.connect(url)
    try:
        await migrate(connection)
    finally:
        await connection.close()
    try:
        yield url
    finally:
        admin = await asyncpg.connect(postgres_url)
        try:
            await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@pytest.fixture
async def database_url(postgres_url: str) -> AsyncIterator[str]:
    """A fresh, migrated database for one test (dropped afterwards)."""
    async with fresh_database(postgres_url) as url:
        yield url


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    """A `Store` on a fresh database."""
    opened = await Store.connect(database_url, min_size=1, max_size=5)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture(scope="session")
def object_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalObjectStore]:
    """A real S3 server (SeaweedFS, bucket `ate`) for the whole session; its credentials and
    endpoint are in this process's environment (AWS_*), where obstore's default chain reads them."""
    # Its five ports are picked free, then bound by the server a moment later: another process
    # may take one in between (CI run 22: "Port allocation failed: port 38178 for Admin ... is not
    # available"), so a server that exits before it is ready is started again on other ports.
    for attempt in range(3):
        server = LocalObjectStore(Path(tmp_path_factory.mktemp("s3")), free_base_port())
        try:
            endpoint = server.start()
            break
        except RuntimeError:
            server.stop()
            if attempt == 2:
                raise
    saved = {k: os.environ.get(k) for k in endpoint.environment()}
    os.environ.update(endpoint.environment())
    try:
        yield server
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def temporal_dev_server(base: Path, attempts: int = 3) -> Iterator[str]:
    """A Temporal dev server (ate's search attributes) under `base`, yielding its address.

    Its ports are picked free, then bound by the server a moment later: another process may take
    one in between (seen once in a fresh-clone run: the UI port, `bind: address already in use`),
    so a server that exits before it is ready is started again on other ports, up to `attempts`.
    """
    for attempt in range(1, attempts + 1):
        port = _free_port()
        child = dev_server_child(base, base / f"temporal-{attempt}.log", port=port, ui_port=_free_port())
        child.start()
        try:
            child.wait_ready(60)
        except ChildFailed:
            child.stop(timeout=15)
            if attempt == attempts:
                raise
            continue
        try:
            yield f"127.0.0.1:{port}"
        finally:
            child.stop(timeout=15)
        return
