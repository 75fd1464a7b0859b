"""Generic supervision of child processes: start, await readiness, watch, restart, stop.

Each child's output goes to a log file; readiness is a line in the log, an HTTP 200, or any
check; a stop is SIGTERM, then SIGKILL of its whole session after a deadline.

A child that exits after it was ready is restarted (`Supervisor.tend`) with a growing delay
(`RestartPolicy`: 1 s, 2 s, 4 s... at most 30 s); too many crashes in a short time give up.

Children run in their own session, so a Ctrl-C in the terminal reaches only the supervisor,
which then stops them in its own order. On Linux each child also gets SIGTERM when the
supervisor dies without stopping it, even by SIGKILL (`PR_SET_PDEATHSIG`).
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


def parent_death_signal(parent: int) -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child get SIGTERM when `parent` (the supervisor) dies.

    The signal is the kernel's `PR_SET_PDEATHSIG`: it comes even when the supervisor is
    SIGKILLed, and it survives the exec. Should the supervisor have died before the child set
    it, the child terminates itself at once. None where it is not available (not Linux).
    """
    libc = _LIBC
    if libc is None:
        return None

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the supervisor is gone already
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


@dataclass(frozen=True)
class RestartPolicy:
    """When a child that exited after being ready is started again.

    Attributes:
        first_delay: Seconds before the first restart; each further crash doubles it.
        max_delay: The longest delay.
        max_crashes: This many crashes within `window` seconds give up.
        window: Seconds over which crashes are counted; a child that stayed up this long
            starts again at `first_delay`.
    """

    first_delay: float = 1.0
    max_delay: float = 30.0
    max_crashes: int = 5
    window: float = 60.0


class CrashCounter:
    """Counts one part's crashes and answers how long to wait before its restart.

    Args:
        policy: The restart policy.
    """

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self._crashes: list[float] = []
        self._streak = 0

    def crashed(self, now: float, up_for: float) -> float | None:
        """Record a crash at `now` after `up_for` seconds of running.

        Returns:
            The seconds to wait before the restart, or None to give up (`max_crashes`
            crashes within `window` seconds).
        """
        policy = self.policy
        self._crashes = [t for t in self._crashes if now - t < policy.window] + [now]
        if len(self._crashes) >= policy.max_crashes:
            return None
        self._streak = 1 if up_for >= policy.window else self._streak + 1
        return min(policy.first_delay * float(2 ** (self._streak - 1)), policy.max_delay)

    @property
    def recent(self) -> int:
        """Crashes within the current window."""
        return len(self._crashes)


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
    """

    name: str
    argv: list[str]
    log_path: Path
    ready: ReadyCheck | None = None
    env: dict[str, str] | None = None
    cwd: Path | None = None
    ready_message: str = ""
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
                preexec_fn=parent_death_signal(os.getpid()),
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


@dataclass
class _Watch:
    """What the supervisor knows about one child between its starts."""

    crashes: CrashCounter
    up_since: float | None = None
    """When it last became ready; None while it is (re)starting or waiting to."""
    restart_at: float | None = None
    """When to start it again after a crash."""
    starting_since: float | None = None
    """When a restart began; it is awaited until ready."""
    last_code: int | None = None


class Supervisor:
    """Starts children in order, watches and restarts them, and stops them in reverse order.

    Args:
        should_stop: Polled during waits; True abandons the wait with `Interrupted`.
        ready_timeout: Seconds each child gets to become ready.
        stop_timeout: Seconds each child gets to exit after SIGTERM.
        policy: When a child that crashed after being ready is started again.
    """

    def __init__(
        self,
        should_stop: Callable[[], bool],
        ready_timeout: float = 60.0,
        stop_timeout: float = 15.0,
        policy: RestartPolicy | None = None,
    ) -> None:
        self.children: list[Child] = []
        self._should_stop = should_stop
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.policy = policy or RestartPolicy()
        self._watch: dict[str, _Watch] = {}

    def start(self, child: Child) -> None:
        """Start `child` and wait until it is ready.

        Raises:
            ChildFailed: It exited or was not ready in time.
            Interrupted: A stop was requested meanwhile.
        """
        self.children.append(child)
        self._watch[child.name] = _Watch(CrashCounter(self.policy))
        child.start()
        child.wait_ready(self.ready_timeout, self._should_stop)
        self._watch[child.name].up_since = time.monotonic()

    def exited(self) -> Child | None:
        """The first child that has exited, if any."""
        return next((c for c in self.children if c.process is not None and c.returncode() is not None), None)

    def is_up(self, child: Child) -> bool:
        """Whether `child` is running and ready (not crashed, not waiting to restart)."""
        watch = self._watch.get(child.name)
        return child.running() and (watch is None or watch.up_since is not None)

    def tend(self, report: Callable[[str], None], now: float | None = None) -> None:
        """One round of watching: restart crashed children, report those ready again.

        A child that exits after having been ready is reported as `<name>: exited (<code>),
        restarting` and started again after the policy's delay; once ready again its
        `ready_message` is reported. A restart that exits or is not ready in time counts as
        another crash.

        Args:
            report: Prints one line.
            now: The current `time.monotonic()` (for tests).

        Raises:
            ChildFailed: A child crashed `max_crashes` times within the policy's window.
        """
        for child in list(self.children):
            watch = self._watch.setdefault(child.name, _Watch(CrashCounter(self.policy)))
            current = time.monotonic() if now is None else now
            if watch.restart_at is not None:
                if current >= watch.restart_at and not self._should_stop():
                    watch.restart_at = None
                    watch.starting_since = current
                    child.start()
                continue
            code = child.returncode()
            if watch.starting_since is not None:
                if code is None:
                    if child.ready is None or child.ready(child):
                        watch.starting_since = None
                        watch.up_since = current
                        report(child.ready_message or f"{child.name}: ready")
                        continue
                    if current - watch.starting_since <= self.ready_timeout:
                        continue
                    child.stop(self.stop_timeout)
                    code = child.returncode()
                    report(f"{child.name}: not ready within {self.ready_timeout:g} s")
                up_for = 0.0
            elif code is not None:
                up_for = current - (watch.up_since if watch.up_since is not None else current)
            else:
                continue
            watch.up_since = watch.starting_since = None
            watch.last_code = code
            child.kill()  # whatever it left in its session
            delay = watch.crashes.crashed(current, up_for)
            if delay is None:
                raise child.failure(
                    f"exited ({code}) {watch.crashes.recent} times within {self.policy.window:.0f} s, giving up"
                )
            report(f"{child.name}: exited ({code}), restarting")
            watch.restart_at = current + delay

    def stop(self, child: Child, report: Callable[[str], None] | None = None) -> None:
        """Stop one child and forget it, reporting its exit."""
        if child not in self.children:
            return
        was_running = child.running()
        code = child.stop(self.stop_timeout)
        self.children.remove(child)
        self._watch.pop(child.name, None)
        if report and was_running:
            report(
                f"{child.name}: stopped" + (f" (exit code {code})" if code not in (0, None, -signal.SIGTERM) else "")
            )

    def stop_all(self, report: Callable[[str], None] | None = None) -> None:
        """Stop every child, the last started first."""
        for child in reversed(list(self.children)):
            self.stop(child, report)

    def kill_all(self) -> None:
        """SIGKILL every child at once."""
        for child in list(self.children):
            child.kill()
