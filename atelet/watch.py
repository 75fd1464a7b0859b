"""Notices a sandbox that exits on its own and says how it ended.

``ExitWatch.gone`` returns once the sandbox of a container is gone; ``ExitWatch.reason`` then gives
a one-line reason. Two sources, whichever answers first:

- ``runsc wait`` (one small subprocess per running sandbox): returns when the container's init
  process exits and gives its exit status (128 + signal when a signal killed it — SIGKILL is what
  the sentry sends on out-of-memory);
- a poll of the sandbox process (``/proc/<pid>/stat`` every ``POLL_SECONDS``): catches a sandbox
  process that was killed from outside, in which case runsc cannot tell an exit status.

The worker is marked exited as soon as either source says so; the status may follow up to
``STATUS_GRACE_SECONDS`` later (when the process poll saw the death first).
The caller cancels ``gone`` when it stops the sandbox itself (Checkpoint, Terminate, shutdown).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

from atelet.runsc import Runsc, pid_alive

POLL_SECONDS = 0.2
# After the sandbox process is seen dead, how long ``runsc wait`` may still take to give a status.
STATUS_GRACE_SECONDS = 1.0
MAX_LOG_LINE = 300


def describe_status(status: int | None) -> str:
    """``exit status 1`` / ``exit status 137 (killed by signal 9, SIGKILL: ...)`` / unknown."""
    if status is None:
        return "sandbox process died (exit status unavailable)"
    if status > 128 and status - 128 < signal.NSIG:
        signum = status - 128
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        hint = ": out of memory or killed" if signum == signal.SIGKILL else ""
        return f"exit status {status} (killed by signal {signum}, {name}{hint})"
    return f"exit status {status}"


def last_log_line(log_path: Path) -> str:
    """The last non-empty line of the actor's log (at most ``MAX_LOG_LINE`` characters), or ''."""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 8192))
            tail = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1][:MAX_LOG_LINE] if lines else ""


def exit_reason(status: int | None, log_path: Path) -> str:
    """One line: how the sandbox ended plus the last line of its log, if any."""
    reason = describe_status(status)
    line = last_log_line(log_path)
    return f"{reason}; last log line: {line}" if line else reason


class ExitWatch:
    """Watches one sandbox: ``gone`` returns once it exited, ``reason`` then says how. ``close``
    (always call it) stops the ``runsc wait`` process if it still runs."""

    def __init__(self, runsc: Runsc, container_id: str) -> None:
        self.runsc = runsc
        self.container_id = container_id
        self._waiter: asyncio.Task[int | None] | None = None

    async def gone(self) -> None:
        """Returns once the container exited (``runsc wait`` answered) or its sandbox process died.
        The PID comes from runsc's state file (``Runsc.saved_pid``; ``runsc state`` when it has
        none): ``runsc state`` waits on a frozen sandbox, and an adopted one may be frozen. A
        frozen sandbox is not gone: its process lives and ``runsc wait`` waits."""
        pid = self.runsc.saved_pid(self.container_id)
        if pid <= 0:
            state = await self.runsc.state(self.container_id)
            pid = int(state.get("pid") or 0) if state else 0
        self._waiter = waiter = asyncio.create_task(self.runsc.wait(self.container_id))
        while True:
            done, _ = await asyncio.wait({waiter}, timeout=POLL_SECONDS)
            if pid <= 0 or not pid_alive(pid):
                return
            if done and _status(waiter) is not None:
                return
            if done:  # runsc wait failed while the sandbox lives on: watch the process alone
                await _until_dead(pid)
                return

    async def reason(self, log_path: Path) -> str:
        """``exit_reason``; waits up to ``STATUS_GRACE_SECONDS`` for runsc to tell the exit status."""
        status = None
        if self._waiter is not None:
            done, _ = await asyncio.wait({self._waiter}, timeout=STATUS_GRACE_SECONDS)
            if done:
                status = _status(self._waiter)
        return exit_reason(status, log_path)

    async def close(self) -> None:
        """Stops ``runsc wait`` if it still runs."""
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiter


def _status(waiter: asyncio.Task[int | None]) -> int | None:
    return None if waiter.exception() is not None else waiter.result()


async def _until_dead(pid: int) -> None:
    while pid_alive(pid):
        await asyncio.sleep(POLL_SECONDS)
