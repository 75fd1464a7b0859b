"""Fixtures for the CLI tests: a small real HTTP server speaking the ate REST API's shapes."""

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from fastapi import FastAPI

from .fake_api import build_app


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerThread:
    """Runs a FastAPI app with uvicorn on 127.0.0.1 in a background thread."""

    def __init__(self, app: FastAPI) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "ServerThread":
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("test API server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(5)


@pytest.fixture(scope="module")
def api_server() -> Iterator[ServerThread]:
    """A fake ate API (fresh state per test module)."""
    app = build_app()
    with ServerThread(app) as server:
        server.state = app.state.store  # type: ignore[attr-defined]
        yield server


@pytest.fixture
def closed_port_url() -> str:
    """A URL where nothing listens."""
    return f"http://127.0.0.1:{free_port()}"
