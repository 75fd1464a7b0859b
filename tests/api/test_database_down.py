"""The api-server while its PostgreSQL is down: a 503 that names the database, not a 500 with an
incident id (the chaos run of 2026-12-02 got `internal server error (incident ...)` for every
request), and the same requests work again once the database is back, without a restart."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from ate.dev.postgres import EmbeddedPostgres
from tests.api.conftest import start_api_server
from tests.conftest import fresh_database
from tests.credentials import SuiteCredentials


@pytest.fixture
def own_postgres() -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL server of this test alone (it is stopped in the middle of the test)."""
    base = Path(tempfile.mkdtemp(prefix="ate-pgdown-", dir="/tmp"))
    base.chmod(0o755)
    server = EmbeddedPostgres(base / "data", database="postgres")
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


DATABASE_TIMEOUT_SECONDS = 2.0  # the api-server's bound on a statement (10 s by default)


def postgres_processes(server: EmbeddedPostgres) -> list[psutil.Process]:
    """The postmaster of `server` and every process it started."""
    postmaster = psutil.Process(int((server.pgdata / "postmaster.pid").read_text().splitlines()[0]))
    return [postmaster, *postmaster.children(recursive=True)]


async def test_requests_while_the_database_is_down_get_a_503_naming_it(
    own_postgres: EmbeddedPostgres, temporal_address: str, tmp_path: Path
) -> None:
    admin_url = await asyncio.to_thread(own_postgres.start)  # it runs its own event loop
    async with fresh_database(admin_url) as url:
        child, server = start_api_server(tmp_path, url, temporal_address,
                                         {"ATE_DATABASE_TIMEOUT_SECONDS": str(DATABASE_TIMEOUT_SECONDS)})
        try:
            async with httpx.AsyncClient(base_url=server.url, auth=SuiteCredentials(), timeout=30) as api:
                assert (await api.post("/v1/atespaces", json={"name": "demo"})).status_code == 201
                await asyncio.to_thread(own_postgres.stop)
                for method, path in (("GET", "/v1/atespaces"), ("GET", "/v1/atespaces/demo/actors/c1"),
                                     ("POST", "/v1/atespaces/demo/actors/c1/resume")):
                    response = await api.request(method, path)
                    body = response.json()
                    assert response.status_code == 503, (path, body)
                    assert body["reason"] == "Unavailable", body
                    assert "database" in body["message"] and "retry" in body["message"], body
                    assert "incident" not in body["message"], body
                    assert response.headers.get("retry-after"), response.headers
                await asyncio.to_thread(own_postgres.start)
                listed = await api.get("/v1/atespaces")
                assert listed.status_code == 200, listed.text
                assert [a["name"] for a in listed.json()["items"]] == ["demo"]
                # Frozen (every process stopped): the request is answered once the statement's
                # time is up, not after the client gave up (30-60 s in the chaos run).
                frozen = postgres_processes(own_postgres)
                for process in frozen:
                    process.suspend()
                try:
                    started = time.monotonic()
                    response = await api.get("/v1/atespaces")
                    waited = time.monotonic() - started
                finally:
                    for process in frozen:
                        process.resume()
                assert response.status_code == 503, response.text
                assert "cannot reach its database (PostgreSQL: TimeoutError" in response.json()["message"]
                assert waited < 2 * DATABASE_TIMEOUT_SECONDS + 5  # the statement's bound, then the cancel's
                assert (await api.get("/v1/atespaces")).status_code == 200
        finally:
            child.stop()
