"""``ate router --data-path nginx``: the control service on a unix socket, nginx in front of it.

The control service (router.nginx.control) is served by uvicorn on ``<run dir>/control.sock``;
nginx (router.nginx.supervisor) listens on ``--listen`` with the configuration of
router.nginx.config; the metrics port exports nginx's request counters with the control
service's own. SIGTERM/SIGINT stop nginx gracefully while the relayed WebSockets and event streams are ended
(close 1001, the end of the stream), then the control service.
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path

import uvicorn

from router.core.metrics import serve_metrics
from router.nginx import config
from router.nginx.control import ControlService
from router.nginx.metrics import metrics_registry
from router.nginx.supervisor import NginxProcess, check_installed
from router.settings import MAX_MESSAGE_BYTES, SESSIONS_END_SECONDS, RouterSettings, split_host_port

log = logging.getLogger("router")


def layout_for(settings: RouterSettings, run_dir: Path) -> config.NginxLayout:
    """The layout of a router run in ``run_dir``: control service on a unix socket there; the
    request log on this process's stderr (at log level info), if nginx can open it."""
    user = getpass.getuser() if os.geteuid() == 0 else None
    access_log = None
    if log.isEnabledFor(logging.INFO):
        access_log = REQUEST_LOG if stderr_reopens() else None
        if access_log is None:
            log.warning("the request log is off: nginx cannot open %s (this process's stderr belongs to another "
                        "user); give the router a stderr of its own user (a pipe, or a file it owns)", REQUEST_LOG)
    return config.NginxLayout(
        run_dir=run_dir,
        control=f"unix:{run_dir / 'control.sock'}",
        workers=settings.nginx_workers,
        user=user,
        access_log=access_log,
    )


REQUEST_LOG = "/dev/stderr"
"""Where nginx writes its access log (nginx opens it by name, as this process's user)."""


def stderr_reopens() -> bool:
    """Whether ``/dev/stderr`` can be opened again for writing by this process's user, as nginx
    opens its logs (it cannot when stderr is a file or pipe of another user: a root shell's
    redirection around ``runuser``, for example)."""
    try:
        fd = os.open(REQUEST_LOG, os.O_WRONLY | os.O_APPEND)
    except OSError:
        return False
    os.close(fd)
    return True


async def serve_nginx(settings: RouterSettings, control_service: Callable[[RouterSettings, str], ControlService]) -> None:
    """Serve actor traffic through nginx until SIGTERM/SIGINT.

    Args:
        settings: Settings in force.
        control_service: Builds the control service from the settings and nginx's admin
            socket (router.main.nginx_control_service: the wiring with the relay).

    Raises:
        SystemExit: nginx is missing, refuses its configuration or does not start.
    """
    binary = check_installed(settings.nginx_binary)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per admin call otherwise
    run_dir = Path(settings.nginx_run_dir or tempfile.mkdtemp(prefix="ate-router-nginx-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    run_dir.chmod(0o755)
    layout = layout_for(settings, run_dir)
    config.write(settings, layout)
    nginx = NginxProcess(layout, binary, settings.stop_grace_seconds)
    nginx.test_config()
    control = control_service(settings, str(layout.admin_socket))
    socket_path = run_dir / "control.sock"
    socket_path.unlink(missing_ok=True)
    server = uvicorn.Server(
        uvicorn.Config(control, uds=str(socket_path), log_level="warning", access_log=False, lifespan="on",
                       server_header=False, date_header=False, timeout_graceful_shutdown=5,
                       ws="websockets-sansio", ws_max_size=MAX_MESSAGE_BYTES, proxy_headers=False)
    )  # fmt: skip
    served = asyncio.create_task(server.serve())
    while not server.started:
        if served.done():
            served.result()
            raise SystemExit(1)
        await asyncio.sleep(0.01)
    metrics_host, metrics_port = split_host_port(settings.metrics_listen)
    metrics = serve_metrics(metrics_host, metrics_port, metrics_registry(control.metrics))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # Installed after uvicorn's own (it captures SIGTERM/SIGINT while serving): these win, and
    # stop nginx before the control service.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await nginx.start()
        workers = f"{settings.nginx_workers} worker{'s' if settings.nginx_workers != 1 else ''}"
        print(f"router: ready on {settings.listen} (nginx data path, {workers})", flush=True)
        await stop.wait()
        log.info("stopping: nginx first (requests in flight finish), then the control service")
    finally:
        # nginx stops listening and lets its requests finish; the relayed WebSockets and event
        # streams, which never finish, are ended meanwhile (close 1001, end of the stream).
        stopping = asyncio.create_task(nginx.stop())
        count = len(control.sessions)
        if not await control.sessions.end_all(SESSIONS_END_SECONDS):
            log.warning("%d WebSockets or event streams did not close in time", len(control.sessions))
        elif count:
            log.info("closed %d WebSockets and event streams", count)
        await stopping
        server.should_exit = True
        await served
        metrics.shutdown()  # type: ignore[attr-defined]
