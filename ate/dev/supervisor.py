"""Supervision of `ate dev`'s child processes: start in order, watch, restart, stop in reverse.

A child that exits after it was ready is restarted (`Supervisor.tend`) with a growing delay
(`ate.dev.restart.RestartPolicy`: 1 s, 2 s, 4 s... at most 30 s); too many crashes in a short
time give up. What one child is (its process, log, readiness, stop) is `ate.dev.child.Child`.
"""

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from ate.dev.child import Child
from ate.dev.restart import CrashCounter, RestartPolicy


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

    def kill(self, child: Child) -> None:
        """SIGKILL one child's process group, wait for it and forget it (no clean stop)."""
        if child not in self.children:
            return
        child.kill()
        if child.process is not None:
            child.process.wait()
        self.children.remove(child)
        self._watch.pop(child.name, None)

    def stop_all(self, report: Callable[[str], None] | None = None) -> None:
        """Stop every child, the last started first."""
        for child in reversed(list(self.children)):
            self.stop(child, report)

    def kill_all(self) -> None:
        """SIGKILL every child at once."""
        for child in list(self.children):
            child.kill()
