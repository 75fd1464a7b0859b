"""How the Python data path serves: uvicorn on the proxy port with the request-head limits of
`serving.protocol`, metrics on their own port, and a stop that ends the open WebSockets and
event streams itself before uvicorn's graceful shutdown."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from types import FrameType

import uvicorn
from starlette.applications import Starlette

from router.core.metrics import serve_metrics
from router.python.app import create_app
from router.python.sessions import Sessions
from router.settings import MAX_MESSAGE_BYTES, SESSIONS_END_SECONDS, RouterSettings, split_host_port
from serving.protocol import guarded_http

log = logging.getLogger("router")


class _Server(uvicorn.Server):
    """uvicorn server that drains on SIGTERM/SIGINT and then exits 0 (no re-raised signal).

    At shutdown it stops listening, then ends the open WebSockets (close 1001 to both sides)
    and event streams (clean end of the body) itself, and only then lets uvicorn wait for the
    other requests: uvicorn alone would wait ``stop_grace_seconds`` for exchanges that
    never end and then cut them off (its own WebSocket close says 1012, with no reason).
    """

    def __init__(self, config: uvicorn.Config, sessions: Sessions | None = None) -> None:
        super().__init__(config)
        self.sessions = sessions

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Start a graceful stop; a second SIGINT forces it."""
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            log.info("signal %s: draining", signal.Signals(sig).name)
            self.should_exit = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Stop listening, end the long-lived exchanges (bounded), then uvicorn's shutdown."""
        for server in self.servers:
            server.close()
        if self.sessions is not None and not self.force_exit:
            count = len(self.sessions)
            if not await self.sessions.end_all(SESSIONS_END_SECONDS):
                log.warning("%d WebSockets or event streams did not close in time", len(self.sessions))
            elif count:
                log.info("closed %d WebSockets and event streams", count)
        await super().shutdown(sockets)


def uvicorn_config(settings: RouterSettings) -> uvicorn.Config:
    """Build the uvicorn config of the proxy port.

    Args:
        settings: Settings in force.

    Returns:
        The config (uvloop when installed, httptools with the request-head limits of
        `serving.protocol`, WebSockets served by the `websockets` library's sans-I/O
        implementation, no Server/Date headers of its own, no trust in incoming
        X-Forwarded-For: the proxy appends the real peer itself).
    """
    host, port = split_host_port(settings.listen)
    return uvicorn.Config(
        create_app(settings),
        host=host,
        port=port,
        http=guarded_http(settings.head_timeout_seconds, settings.max_head_bytes),
        ws="websockets-sansio",  # "websockets" is that library's legacy API, deprecated since its 14.0
        ws_max_size=MAX_MESSAGE_BYTES,
        log_level="warning",
        access_log=False,
        server_header=False,
        date_header=False,
        timeout_graceful_shutdown=settings.stop_grace_seconds,
        lifespan="on",
        proxy_headers=False,
    )


async def serve(settings: RouterSettings, config: uvicorn.Config) -> None:
    """Serve the router until told to stop (SIGTERM/SIGINT), metrics on their own port.

    Args:
        settings: Settings in force.
        config: From ``uvicorn_config``.

    Raises:
        SystemExit: The server failed to start (e.g. the port is taken).
    """
    metrics_host, metrics_port = split_host_port(settings.metrics_listen)
    metrics_server = serve_metrics(metrics_host, metrics_port)
    app = config.app
    server = _Server(config, app.state.router.sessions if isinstance(app, Starlette) else None)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if server.started:
            print(f"router: ready on {settings.listen}", flush=True)
        await task
    finally:
        metrics_server.shutdown()  # type: ignore[attr-defined]
    if not server.started:
        raise SystemExit(1)
