"""Running nginx for the router: start it, wait until it serves, restart it when it dies, stop it.

nginx runs in the foreground (``daemon off``) as a child of the router, in a session of its
own, and is asked to end with it: Linux sends the master SIGTERM when the router dies
(PR_SET_PDEATHSIG), so no nginx outlives its control service and serves from entries nobody
invalidates any more. A master that dies leaves its workers serving: the supervisor kills its
process group before starting a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import subprocess
from pathlib import Path

import httpx

from router.nginx.config import MODULES, NginxLayout

log = logging.getLogger(__name__)

STOP_MARGIN_SECONDS = 5.0
"""How much longer than its ``worker_shutdown_timeout`` (the router's --stop-grace) nginx may
take to stop after SIGQUIT before it is killed."""


class NginxError(RuntimeError):
    """nginx is missing, refuses its configuration, or does not come up; the message says which
    and what to do."""


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent dies (Linux PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def check_installed(binary: str = "nginx") -> str:
    """The nginx binary's path, once the Lua module is there too.

    Raises:
        NginxError: nginx or its Lua module is not installed (names the Debian packages).
    """
    found = shutil.which(binary)
    missing = [m for m in MODULES if not Path(m).exists()]
    if found is None or missing:
        what = f"nginx ({binary!r} not on PATH)" if found is None else f"nginx's Lua module ({', '.join(missing)})"
        raise NginxError(
            f"--data-path nginx needs {what}: install Debian's nginx and libnginx-mod-http-lua "
            "(scripts/install.sh does), or run the router with --data-path python"
        )
    return found


class NginxProcess:
    """One nginx master process serving the router's generated configuration.

    Args:
        layout: Where its files are (nginx.conf must be written already).
        binary: The nginx program.
        stop_grace_seconds: The ``worker_shutdown_timeout`` in nginx.conf (the router's
            --stop-grace): at its stop nginx is killed ``STOP_MARGIN_SECONDS`` after it.
    """

    def __init__(self, layout: NginxLayout, binary: str = "nginx", stop_grace_seconds: float = 10.0) -> None:
        self.layout = layout
        self.binary = binary
        self.stop_seconds = stop_grace_seconds + STOP_MARGIN_SECONDS
        self.process: subprocess.Popen[bytes] | None = None
        self._stopping = False
        self._watch: asyncio.Task[None] | None = None

    def test_config(self) -> None:
        """``nginx -t`` on the generated configuration.

        Raises:
            NginxError: nginx refuses it (its own message included).
        """
        done = subprocess.run(
            [self.binary, "-t", "-q", "-p", str(self.layout.run_dir), "-c", str(self.layout.conf),
             "-e", str(self.layout.run_dir / "error.log")],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise NginxError(f"nginx refuses the generated {self.layout.conf}: {done.stderr.strip()}")

    async def start(self, ready_seconds: float = 10.0) -> None:
        """Start nginx and return once its admin socket answers; then watch it (restart on death).

        Raises:
            NginxError: it exited or did not answer within ``ready_seconds``.
        """
        await self._spawn(ready_seconds)
        self._watch = asyncio.create_task(self._supervise(), name="ate-router-nginx")

    async def _spawn(self, ready_seconds: float) -> None:
        self.layout.admin_socket.unlink(missing_ok=True)
        self.process = subprocess.Popen(
            [self.binary, "-p", str(self.layout.run_dir), "-c", str(self.layout.conf),
             "-e", str(self.layout.run_dir / "error.log")],
            preexec_fn=_die_with_parent, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ready_seconds
        transport = httpx.AsyncHTTPTransport(uds=str(self.layout.admin_socket))
        async with httpx.AsyncClient(transport=transport, base_url="http://nginx") as client:
            while True:
                if self.process.poll() is not None:
                    raise NginxError(f"nginx exited with {self.process.returncode} at start; see {self._error_log()}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get("/stats", timeout=1)).status_code == 200:
                        log.info("nginx %d serving (%d worker processes)", self.process.pid, self.layout.workers)
                        return
                if loop.time() > deadline:
                    raise NginxError(f"nginx did not come up within {ready_seconds:g}s; see {self._error_log()}")
                await asyncio.sleep(0.02)

    def _error_log(self) -> str:
        path = self.layout.run_dir / "error.log"
        try:
            tail = path.read_text(errors="replace").strip().splitlines()[-3:]
        except OSError:
            return str(path)
        return f"{path}: " + " | ".join(tail)

    async def _supervise(self) -> None:
        delay = 0.1
        while True:
            assert self.process is not None
            code = await asyncio.to_thread(self.process.wait)
            self._kill_group()  # a master that was killed leaves its workers serving
            if self._stopping:
                return
            log.error("nginx exited with %s: restarting in %.1fs (its caches start empty)", code, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            try:
                await self._spawn(10.0)
                delay = 0.1
            except NginxError as exc:
                log.error("%s", exc)

    def _kill_group(self) -> None:
        """SIGKILL what is left of nginx's process group (its own session: the workers)."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)

    async def stop(self) -> None:
        """Stop nginx gracefully (SIGQUIT: requests in flight finish), killing it
        ``stop_seconds`` after SIGQUIT."""
        self._stopping = True
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGQUIT)
            try:
                await asyncio.wait_for(asyncio.to_thread(process.wait), self.stop_seconds)
            except TimeoutError:
                self._kill_group()
                await asyncio.to_thread(process.wait)
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
