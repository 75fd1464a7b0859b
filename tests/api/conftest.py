"""A real `ate api-server` process on a real PostgreSQL database and Temporal dev server, for the
tests of the REST API itself (access, tokens, OIDC)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx
import pytest

from activities.store import migrate
from ate.dev.temporal import dev_server_child
from tests.conftest import _with_database as with_database
from tests.credentials import BOOTSTRAP_HEADERS, BOOTSTRAP_TOKEN
from tests.tls import certificates

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Temporal dev server (with ate's search attributes) for this module."""
    base = tmp_path_factory.mktemp("temporal")
    port = free_port()
    child = dev_server_child(base, base / "temporal.log", port=port, ui_port=free_port())
    child.start()
    try:
        child.wait_ready(60)
        yield f"127.0.0.1:{port}"
    finally:
        child.stop(timeout=15)


@pytest.fixture(scope="module")
def module_database_url(postgres_url: str) -> Iterator[str]:
    """A fresh, migrated database for one test module (dropped afterwards)."""
    name = f"ate_api_{uuid.uuid4().hex[:12]}"
    url = with_database(postgres_url, name)

    async def run(sql: str) -> None:
        admin = await asyncpg.connect(postgres_url)
        try:
            await admin.execute(sql)
        finally:
            await admin.close()

    async def migrated() -> None:
        connection = await asyncpg.connect(url)
        try:
            await migrate(connection)
        finally:
            await connection.close()

    asyncio.run(run(f'CREATE DATABASE "{name}"'))
    asyncio.run(migrated())
    yield url
    asyncio.run(run(f'DROP DATABASE "{name}" WITH (FORCE)'))


@dataclass
class ApiProcess:
    """A running api-server: its URL, its log, and headers with the bootstrap token."""

    url: str
    log: Path
    database_url: str
    bootstrap: dict[str, str] = field(default_factory=lambda: dict(BOOTSTRAP_HEADERS))

    def client(self, token: str | None = None) -> httpx.Client:
        """An HTTP client of this server, with `token` as its bearer token (None: no token)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


@contextlib.contextmanager
def api_process(base: Path, database_url: str, temporal_address: str, **env: str) -> Iterator[ApiProcess]:
    """`python -m api` on a free port with the bootstrap token and `env` (ATE_* settings)."""
    port = free_port()
    log = base / f"api-{port}.log"
    out = log.open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "api", "--port", str(port)],
        cwd=REPO,
        stdout=out,
        stderr=subprocess.STDOUT,
        env={
            **os.environ,
            "ATE_DATABASE_URL": database_url,
            "ATE_TEMPORAL_ADDRESS": temporal_address,
            "ATE_BOOTSTRAP_TOKEN": BOOTSTRAP_TOKEN,
            "ATE_SNAPSHOT_LOCATION": f"file://{base / 'snapshots'}",
            "ATE_NODE_CA_FILE": str(certificates().ca),
            **env,
        },
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"api-server exited ({process.returncode}):\n{log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"api-server not ready in 60 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        yield ApiProcess(url=url, log=log, database_url=database_url)
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        out.close()


@pytest.fixture(scope="module")
def api(
    tmp_path_factory: pytest.TempPathFactory, module_database_url: str, temporal_address: str
) -> Iterator[ApiProcess]:
    """An api-server for this module (ate tokens and the bootstrap token only)."""
    with api_process(tmp_path_factory.mktemp("api"), module_database_url, temporal_address) as running:
        yield running
