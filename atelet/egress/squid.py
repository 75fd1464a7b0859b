"""The node's Squid process: its run dir made ready, started, reconfigured, restarted, stopped.

Squid runs in the foreground (``squid -N``) as a child of the atelet, as root until it has bound
its ports and read its configuration and CA key, then as its own user (``SQUID_USER``), which
its helpers run as too. Everything that user reads or writes lies in the run dir
(``SquidPlan.run_dir``, owned by it): the helper script (``atelet.egress.relay``), the hosts
file, the error pages, the certificate cache, Squid's logs and pid file. ``squid.conf`` itself
lies in the atelet's state dir (Squid reads it as root).

Should Squid exit on its own, it is started again (after 1 s, doubling up to 30 s while it keeps
failing); meanwhile the sandboxes' connections to its ports are refused. A Squid left by an
atelet that died (it outlives it: a setuid process loses its parent-death signal) is stopped
by the next ``start``, found by its pid file. ``reconfigure`` writes the configuration again and
sends SIGHUP: Squid re-reads it, restarts its helpers and reopens its ports (connections made in
that instant, tens of milliseconds, are refused).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pwd
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from atelet.egress import relay
from atelet.egress.squid_config import ERROR_PAGES, SQUID_USER, SquidPlan, render
from atelet.errors import internal

log = logging.getLogger(__name__)

TEMPLATES = (Path("/usr/share/squid/errors/templates"), Path("/usr/share/squid-langpack/templates"))
"""Where Squid's own error page templates may be (Debian's squid-common, squid-langpack)."""
CERTGEN = Path("/usr/lib/squid/security_file_certgen")
READY_SECONDS = 20.0


def squid_ids() -> tuple[int, int]:
    """(uid, gid) of ``SQUID_USER``.

    Raises:
        AteletError: INTERNAL when there is no such user (Squid is not installed).
    """
    try:
        entry = pwd.getpwnam(SQUID_USER)
    except KeyError:
        raise internal(f"egress: no user {SQUID_USER!r}: install Squid (apt-get install squid-openssl)") from None
    return entry.pw_uid, entry.pw_gid


def interpreter() -> str:
    """The Python the relay script runs with (it needs only the standard library): the system's
    ``python3`` when there is one, since this process's may lie where Squid's user cannot go
    (a venv or pyenv under /root), else this one's base interpreter."""
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system is not None:
        return os.path.realpath(system)
    return os.path.realpath(getattr(sys, "_base_executable", "") or sys.executable)


def hosts_text(source: Path | None, clients: dict[str, str]) -> str:
    """Squid's hosts file: ``source``'s lines (/etc/hosts when None and it exists), then one line
    per address of ``clients`` (address to name). Squid 5.7 looks up the name of every client
    address as it accepts a connection (its built-in ``icap_squid`` log format asks for it,
    whether used or not), and a name it has from its hosts file costs no DNS query, which would
    otherwise leave for the network and hold the connection until the DNS answer or time-out."""
    source = source if source is not None else Path("/etc/hosts")
    text = source.read_text() if source.exists() else ""
    if text and not text.endswith("\n"):
        text += "\n"
    return text + "".join(f"{address} {name}\n" for address, name in clients.items())


def prepare_run_dir(plan: SquidPlan, hosts_source: Path | None, clients: dict[str, str]) -> None:
    """Makes the run dir Squid's user owns: the relay script, the hosts file (``hosts_text`` of
    ``hosts_source`` and ``clients``), the error pages (Squid's templates and ``ERROR_PAGES``)
    and the certificate cache (made by ``security_file_certgen -c`` when missing).

    Raises:
        AteletError: INTERNAL when a part cannot be made (named).
        OSError: the dir cannot be written.
    """
    uid, gid = squid_ids()
    run = plan.run_dir
    run.mkdir(parents=True, exist_ok=True)
    os.chown(run, uid, gid)
    run.chmod(0o750)
    plan.relay.write_text(relay.script(interpreter()))
    plan.relay.chmod(0o755)
    plan.hosts_file.write_text(hosts_text(hosts_source, clients))
    plan.hosts_file.chmod(0o644)
    errors = plan.errors_dir
    errors.mkdir(exist_ok=True)
    source = next((t for t in TEMPLATES if (t / "ERR_ACCESS_DENIED").exists()), None)
    if source is None:
        raise internal(f"egress: Squid's error templates are missing (looked in {', '.join(map(str, TEMPLATES))})")
    for template in source.iterdir():
        if template.is_file():
            shutil.copyfile(template, errors / template.name)
    for name, text in ERROR_PAGES.items():
        (errors / name).write_text(text)
    if not plan.certificate_db.exists():
        made = subprocess_run([str(plan.certgen), "-c", "-s", str(plan.certificate_db), "-M", "4MB"])
        if made:
            raise internal(f"egress: the certificate cache {plan.certificate_db} could not be made: {made}")
    for path in (run, *run.rglob("*")):
        os.chown(path, uid, gid, follow_symlinks=False)


def subprocess_run(argv: list[str]) -> str:
    """Runs ``argv``; '' when it exited 0, else its exit status and last output line."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode == 0:
        return ""
    last = (done.stderr or done.stdout).strip().splitlines()[-1:]
    return f"exit {done.returncode}: {last[0] if last else ''}"


def _no_core_dumps() -> None:
    """In Squid's process before it runs: no core file, ever (its helpers inherit the limit): a
    core of Squid holds the credentials' values in flight and the egress CA's private key."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def stop_leftover(pid_file: Path, config: Path) -> None:
    """Stops the Squid a previous atelet left running with ``config`` (found by ``pid_file``)."""
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        pid_file.unlink(missing_ok=True)
        return
    if str(config).encode() not in cmdline:
        pid_file.unlink(missing_ok=True)
        return
    log.warning("egress: stopping the Squid (pid %d) a previous atelet left running", pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        for _ in range(50):
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.1)
    pid_file.unlink(missing_ok=True)


def _listening(address: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((address, port)) == 0


def _tail(path: Path, lines: int = 3) -> str:
    """The FATAL lines of Squid's log ``path``, or its last ``lines`` lines."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    fatal = [line for line in text if "FATAL" in line]
    return " | ".join(fatal[-lines:] or text[-lines:])


class Squid:
    """One Squid process, supervised.

    Args:
        binary: the Squid executable.
        config: where ``squid.conf`` is written.
        plan: returns the plan to render at each (re)start and reconfigure.
    """

    def __init__(self, binary: str, config: Path, plan: Callable[[], SquidPlan]) -> None:
        self.binary = binary
        self.config = config
        self.plan = plan
        self._process: asyncio.subprocess.Process | None = None
        self._watch: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def pid(self) -> int | None:
        """The running Squid's pid."""
        return self._process.pid if self._process is not None and self._process.returncode is None else None

    def write_config(self) -> SquidPlan:
        """Renders the plan into ``config`` (mode 0600); returns the plan."""
        plan = self.plan()
        self.config.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.config.with_suffix(".tmp")
        descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(render(plan))
        os.replace(tmp, self.config)
        return plan

    async def start(self) -> None:
        """Stops a leftover Squid, starts this one and waits until it listens, then watches it.

        Raises:
            AteletError: INTERNAL when Squid exits or does not listen within READY_SECONDS (its
                last log lines named).
        """
        plan = self.write_config()
        await asyncio.to_thread(stop_leftover, plan.pid_file, self.config)
        await self._spawn(plan)
        self._watch = asyncio.create_task(self._supervise())

    async def _spawn(self, plan: SquidPlan) -> None:
        out = os.open(plan.run_dir / "squid.out", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        try:
            self._process = await asyncio.create_subprocess_exec(
                self.binary, "-N", "-f", str(self.config), stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
                start_new_session=True, preexec_fn=_no_core_dumps,
            )  # fmt: skip
        except FileNotFoundError:
            raise internal(f"egress: no Squid binary {self.binary!r} (apt-get install squid-openssl)") from None
        finally:
            os.close(out)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_SECONDS
        address, port = plan.gateways[0], plan.proxy_port
        while not await asyncio.to_thread(_listening, address, port):
            if self._process.returncode is not None or loop.time() > deadline:
                if self._process.returncode is None:
                    self._process.kill()
                await self._process.wait()
                raise internal(f"egress: Squid did not start ({self.binary} -N -f {self.config}): "
                               f"{_tail(plan.cache_log) or _tail(plan.run_dir / 'squid.out')}")  # fmt: skip
            await asyncio.sleep(0.02)
        log.info("egress: Squid (pid %d) listening on %d worker gateways, ports %d, %d, %d", self._process.pid,
                 len(plan.gateways), plan.proxy_port, plan.http_port, plan.https_port)  # fmt: skip

    async def _supervise(self) -> None:
        delay = 1.0
        while not self._stopping:
            assert self._process is not None
            code = await self._process.wait()
            if self._stopping:
                return
            plan = self.plan()
            log.error("egress: Squid exited (status %s): %s; starting it again in %.0f s", code,
                      _tail(plan.cache_log), delay)  # fmt: skip
            await asyncio.sleep(delay)
            try:
                plan = self.write_config()
                await self._spawn(plan)
                delay = 1.0
            except Exception as error:  # keep trying: the sandboxes' egress depends on it
                log.error("egress: Squid did not start again: %s", error)
                delay = min(delay * 2, 30.0)

    async def reconfigure(self) -> None:
        """Writes the configuration again and has Squid re-read it (SIGHUP)."""
        self.write_config()
        if self.pid is not None:
            os.kill(self.pid, signal.SIGHUP)
            log.info("egress: Squid reconfigured")

    async def stop(self) -> None:
        """Stops Squid (SIGTERM, SIGKILL after 5 s) and its watch."""
        self._stopping = True
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        process = self._process
        if process is not None and process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 5)
            except TimeoutError:
                process.kill()
                await process.wait()
        log.info("egress: Squid stopped")
