"""A real api-server for the tests of this package: `python -m ate api-server` on a free port,
on a fresh PostgreSQL database and a Temporal dev server of its own (one of each per module),
started with the suite's bootstrap token and node CA (tests/credentials.py, tests/tls.py).

No Temporal worker runs: a workflow the API starts (a template's GoldenSnapshot, a drain) stays
scheduled, which is all these tests need from it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from ate.dev.child import Child, http_ok
from store import Store
from tests.conftest import fresh_database, temporal_dev_server
from tests.credentials import BOOTSTRAP_ENV, BOOTSTRAP_HEADERS, BOOTSTRAP_TOKEN, SECRET_KEYS_ENV, SuiteCredentials
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
    with temporal_dev_server(tmp_path_factory.mktemp("temporal")) as address:
        yield address


@pytest.fixture(scope="module")
async def api_database_url(postgres_url: str) -> AsyncIterator[str]:
    """A fresh, migrated database for this module's api-server."""
    async with fresh_database(postgres_url) as url:
        yield url


@dataclass
class ApiServer:
    """A running api-server: its base URL, its log and its snapshot root."""

    url: str
    log: Path
    snapshots: Path


def start_api_server(
    base: Path, database_url: str, temporal_address: str, env: dict[str, str] | None = None
) -> tuple[Child, ApiServer]:
    """Start `python -m ate api-server` on a free port and wait until /healthz answers 200."""
    port = free_port()
    snapshots = base / "snapshots"
    snapshots.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{port}"
    argv = [
        sys.executable, "-m", "ate", "api-server", "--host", "127.0.0.1", "--port", str(port),
        "--database-url", database_url, "--temporal-address", temporal_address,
        "--snapshot-location", f"file://{snapshots}",
    ]  # fmt: skip
    child = Child("api-server", argv, base / "api-server.log", ready=http_ok(f"{url}/healthz"),
                  env={**os.environ, **BOOTSTRAP_ENV, **SECRET_KEYS_ENV, "ATE_NODE_CA_FILE": str(certificates().ca), **(env or {})},
                  cwd=REPO)  # fmt: skip
    child.start()
    try:
        child.wait_ready(60)
    except BaseException:
        child.stop()
        raise
    return child, ApiServer(url=url, log=child.log_path, snapshots=snapshots)


@pytest.fixture(scope="module")
def api_server(
    tmp_path_factory: pytest.TempPathFactory, api_database_url: str, temporal_address: str
) -> Iterator[ApiServer]:
    """This module's api-server."""
    child, server = start_api_server(tmp_path_factory.mktemp("api"), api_database_url, temporal_address)
    try:
        yield server
    finally:
        child.stop()


@pytest.fixture(scope="session")
def api_headers() -> dict[str, str]:
    """Headers of requests that are not a node's: the bootstrap token, a cluster admin (the
    raw-socket requests of test_limits.py are answered below the app, before any route)."""
    return dict(BOOTSTRAP_HEADERS)


@pytest.fixture
async def api(api_server: ApiServer) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of this module's api-server: a cluster admin, and node N's own certificate
    for node N's registration and events (tests/credentials.SuiteCredentials)."""
    async with httpx.AsyncClient(base_url=api_server.url, auth=SuiteCredentials(), timeout=30) as client:
        yield client


@pytest.fixture
async def api_store(api_database_url: str) -> AsyncIterator[Store]:
    """The api-server's own store, to read what a request did (or did not) change."""
    opened = await Store.connect(api_database_url, min_size=1, max_size=2)
    try:
        yield opened
    finally:
        await opened.close()


async def stored_state(store: Store) -> dict[str, object]:
    """Everything requests can change, read from the store: atespaces, templates, actors, tags,
    nodes and workers (to check that a refused request changed nothing)."""
    atespaces = await store.atespaces.all()
    templates, tags = [], []
    for atespace in atespaces:
        templates += [(t.atespace, t.name, repr(t.spec)) for t in await store.templates.of_atespace(atespace.name)]
        tags += [(t.atespace, t.name) for t in await store.tags.of_atespace(atespace.name)]
    actors, _ = await store.actors.page(None, None, 1000, None)
    nodes = await store.pool.fetch("SELECT name, address, runsc_version FROM nodes")
    workers = await store.nodes.list_workers()
    return {
        "atespaces": sorted(a.name for a in atespaces),
        "templates": sorted(templates),
        "actors": sorted((a.atespace, a.name, a.template, tuple(sorted(a.worker_selector.items()))) for a in actors),
        "tags": sorted(tags),
        "nodes": sorted(tuple(r) for r in nodes),
        "workers": sorted((w.node, w.name, w.pool, w.ip, w.state, w.cpu_millis, w.memory_bytes) for w in workers),
    }


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
            **SECRET_KEYS_ENV,
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
