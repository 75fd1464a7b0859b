"""One supervised child process of `ate dev`: how it starts, when it is ready, how it stops.

Its output goes to a log file; readiness is a line in the log (`log_line`), an HTTP 200
(`http_ok`), or any check; a stop is SIGTERM, then SIGKILL of its whole session after a deadline.
A child that exits or is not ready in time raises `ChildFailed` with the tail of its log.

Each child runs in its own session, so a Ctrl-C in the terminal reaches only the supervisor,
which then stops them in its own order. On Linux each child also gets SIGTERM (the atelet:
SIGKILL, `Child.death_signal`) when the supervisor dies without stopping it, even by SIGKILL
(`PR_SET_PDEATHSIG`).
"""

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx

ReadyCheck = Callable[["Child"], bool]
"""Answers whether a started child is ready; called every poll interval."""

POLL_INTERVAL = 0.2
TAIL_LINES = 30


class ChildFailed(Exception):
    """A child exited or did not become ready.

    Attributes:
        name: The child's name.
        reason: What went wrong, e.g. `exited with code 1`.
        log_path: Its log file.
        tail: The last lines of its log.
    """

    def __init__(self, name: str, reason: str, log_path: Path | None, tail: list[str]) -> None:
        super().__init__(f"{name}: {reason}")
        self.name = name
        self.reason = reason
        self.log_path = log_path
        self.tail = tail


class Interrupted(Exception):
    """A stop was requested while waiting."""


PR_SET_PDEATHSIG = 1


def _load_libc() -> ctypes.CDLL | None:
    """libc, loaded once in the supervisor (loading it in a forked child could deadlock)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _load_libc()


def parent_death_signal(parent: int, signum: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child get `signum` (SIGTERM) when `parent` (the supervisor) dies.

    The signal is the kernel's `PR_SET_PDEATHSIG`: it comes even when the supervisor is
    SIGKILLed, and it survives the exec. Should the supervisor have died before the child set
    it, the child terminates itself at once. None where it is not available (not Linux).
    """
    libc = _LIBC
    if libc is None:
        return None

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:  # the supervisor is gone already
            os.kill(os.getpid(), signum)

    return preexec


def log_line(text: str) -> ReadyCheck:
    """A readiness check: `text` appears in the child's log (this run's part of it)."""

    def check(child: "Child") -> bool:
        return child.log_contains(text)

    return check


def http_ok(url: str) -> ReadyCheck:
    """A readiness check: GET `url` answers 200."""

    def check(_child: "Child") -> bool:
        try:
            return httpx.get(url, timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    return check


def read_tail(path: Path, lines: int = TAIL_LINES, start: int = 0) -> list[str]:
    """The last `lines` lines of a file from byte offset `start` on (empty if missing)."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(start, size - 256 * 1024))
            data = f.read()
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-lines:]


@dataclass
class Child:
    """One supervised process.

    Attributes:
        name: Short name used in messages (`api-server`).
        argv: The command line.
        log_path: Where stdout and stderr go (appended).
        ready: The readiness check; None means ready once started.
        env: The full environment; None inherits the supervisor's.
        cwd: Working directory; None inherits.
        ready_message: The line reported each time it becomes ready (again).
        death_signal: What the process gets when the supervisor dies without stopping it
            (SIGTERM; the atelet's is SIGKILL, see `ate.dev.parts.atelet`).
    """

    name: str
    argv: list[str]
    log_path: Path
    ready: ReadyCheck | None = None
    env: dict[str, str] | None = None
    cwd: Path | None = None
    ready_message: str = ""
    death_signal: int = signal.SIGTERM
    process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _log_start: int = field(default=0, init=False, repr=False)
    _scan_pos: int = field(default=0, init=False, repr=False)
    _scan_carry: str = field(default="", init=False, repr=False)

    def start(self) -> None:
        """Start the process with its output appended to `log_path`."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            stamp = datetime.now().isoformat(timespec="seconds")
            log.write(f"=== {stamp} ate dev: starting {' '.join(self.argv)}\n".encode())
            log.flush()
            self._log_start = log.tell()
            self._scan_pos = self._log_start
            self._scan_carry = ""
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=parent_death_signal(os.getpid(), self.death_signal),
            )

    @property
    def pid(self) -> int | None:
        """The process ID, once started."""
        return self.process.pid if self.process else None

    def returncode(self) -> int | None:
        """The exit code, or None while running (or never started)."""
        return self.process.poll() if self.process else None

    def running(self) -> bool:
        """Whether the process was started and has not exited."""
        return self.process is not None and self.process.poll() is None

    def log_contains(self, text: str) -> bool:
        """Whether `text` was written to the log since this run started (read incrementally)."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(self._scan_pos)
                chunk = f.read()
        except OSError:
            return False
        self._scan_pos += len(chunk)
        haystack = self._scan_carry + chunk.decode("utf-8", "replace")
        if text in haystack:
            self._scan_carry = haystack  # keep answering True
            return True
        self._scan_carry = haystack[-len(text) :]
        return False

    def tail(self, lines: int = TAIL_LINES) -> list[str]:
        """The last lines this run wrote to its log."""
        return read_tail(self.log_path, lines, self._log_start)

    def failure(self, reason: str) -> ChildFailed:
        """A `ChildFailed` for this child with its log tail."""
        return ChildFailed(self.name, reason, self.log_path, self.tail())

    def wait_ready(self, timeout: float, should_stop: Callable[[], bool] = lambda: False) -> None:
        """Block until the readiness check passes.

        Args:
            timeout: Seconds to wait.
            should_stop: Polled; when it returns True the wait is abandoned.

        Raises:
            ChildFailed: The child exited or did not become ready in time.
            Interrupted: `should_stop` returned True.
        """
        deadline = time.monotonic() + timeout
        while True:
            if should_stop():
                raise Interrupted(self.name)
            code = self.returncode()
            if code is not None:
                raise self.failure(f"exited with code {code} before it was ready")
            if self.ready is None or self.ready(self):
                return
            if time.monotonic() > deadline:
                raise self.failure(f"not ready within {timeout:.0f} s")
            time.sleep(POLL_INTERVAL)

    def _signal_group(self, sig: int) -> None:
        """Send `sig` to the child's process group (its session), ignoring a gone group."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM the process, wait up to `timeout`, then SIGKILL its whole group.

        Returns:
            The exit code, or None if it was never started.
        """
        if self.process is None:
            return None
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.process.wait()
        # Whatever the child left behind in its session goes too.
        self._signal_group(signal.SIGKILL)
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL the whole group at once, without waiting."""
        self._signal_group(signal.SIGKILL)
