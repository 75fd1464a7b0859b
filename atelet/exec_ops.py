"""Exec (issue 29): running a command inside a RUNNING actor's sandbox for debugging, as
`kubectl exec` does in a pod, and answering its exit status and output once it ends.

The command runs next to the workload (``SandboxDriver.exec_in``: ``runsc exec`` for gVisor);
its stdout and stderr go to files in the worker's directory, of which ``max_output_bytes`` each
are answered. An exec holds the worker's lock only to check and register itself: it never keeps
a checkpoint from happening. A checkpoint ends every exec of the worker first (``end``), so that
no exec'd process is saved into the snapshot with its output bound to a host file that a restore
would not find; the exec then answers ``ended: suspended``. A sandbox stopped under an exec makes
it answer ``ended: stopped``; one that runs past its timeout is killed (``ended: timeout``).

Not recorded in the operation log: an exec is not idempotent, and a repeat runs it again (the
control plane does not retry it).

Errors: INVALID_ARGUMENT (an empty command, a timeout out of range), NOT_FOUND (unknown worker),
FAILED_PRECONDITION (the worker does not run the actor, or its sandbox is frozen or exited, or
its sandbox class has no exec), INTERNAL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from atelet.drivers import Drivers
from atelet.errors import invalid, precondition
from atelet.layout import NodeLayout
from atelet.proto import atelet_pb2 as pb
from atelet.spec import actor_key
from atelet.workers import WorkerTable, describe

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 60.0
MAX_TIMEOUT_SECONDS = 3600.0
DEFAULT_OUTPUT_BYTES = 1 << 20
END_GRACE_SECONDS = 10.0
"""How long ``end`` waits for an exec to go after it was told to (its kill is immediate)."""


@dataclass(eq=False)
class _RunningExec:
    """One exec in flight: its task, and why it was ended ('' while nobody ended it)."""

    task: asyncio.Task[int]
    ended: str = ""
    done: asyncio.Event = field(default_factory=asyncio.Event)


class ExecOperations:
    """Exec on the node's workers, and the ending of a worker's execs before its checkpoint.

    Args:
        hollow: benchmark mode: no sandbox runs, every exec is refused.
        table: the workers.
        layout: where each worker's exec output files go.
        drivers: the runtime of each sandbox class.
    """

    def __init__(self, hollow: bool, table: WorkerTable, layout: NodeLayout, drivers: Drivers) -> None:
        self.hollow = hollow
        self.table = table
        self.layout = layout
        self.drivers = drivers
        self._running: dict[str, set[_RunningExec]] = {}

    async def exec(self, req: pb.ExecRequest) -> pb.ExecResponse:
        """Runs ``req.command`` in ``req.actor``'s sandbox on ``req.worker`` until it ends.

        Returns:
            The exit status (-1 when it could not be told), up to ``max_output_bytes`` of stdout
            and stderr each, whether each was cut, what ended it ('' by itself, ``timeout``,
            ``suspended``, ``stopped``) and its seconds.

        Raises:
            AteletError: see the module doc.
        """
        if not req.command or not req.command[0]:
            raise invalid("command: give the program to run and its arguments, e.g. ['cat', '/data/count.txt']")
        timeout = req.timeout_seconds or DEFAULT_TIMEOUT_SECONDS
        if not 0 < timeout <= MAX_TIMEOUT_SECONDS:
            raise invalid(f"timeout_seconds: must be more than 0 and at most {MAX_TIMEOUT_SECONDS:.0f}, not {timeout}")
        limit = req.max_output_bytes or DEFAULT_OUTPUT_BYTES
        actor = actor_key(req.actor)
        worker = self.table.get(req.worker)
        async with worker.lock:
            if worker.actor != actor or worker.state != "running" or worker.container_id is None:
                raise precondition(f"worker {worker.name} runs {describe(worker.actor)} (state {worker.state}), "
                                   f"not a running {describe(actor)}; exec needs the actor RUNNING")
            if worker.frozen:
                raise precondition(f"{describe(actor)} is frozen on {worker.name}: its sandbox runs nothing until "
                                   "it is thawed (a request to it, or `ate resume actor`); then exec again")
            if worker.checkpoint is not None:
                raise precondition(f"{describe(actor)} is being checkpointed on {worker.name}; exec after it "
                                   "is resumed")
            if self.hollow:
                raise precondition("this atelet runs no sandboxes (hollow mode): nothing to exec into")
            driver = self.drivers[worker.pool.sandbox_class]
            if not driver.can_exec:
                raise precondition(f"exec is not available for sandbox class {worker.pool.sandbox_class} yet; "
                                   "it works for gvisor")
            container_id = worker.container_id
            base = self.layout.exec_dir(worker.name) / uuid.uuid4().hex[:12]
            base.mkdir(parents=True, exist_ok=True)
            out, err = base / "stdout", base / "stderr"
            running = _RunningExec(asyncio.create_task(driver.exec_in(container_id, list(req.command), out, err)))
            self._running.setdefault(worker.name, set()).add(running)
        started = time.monotonic()
        try:
            done, _ = await asyncio.wait({running.task}, timeout=timeout)
            if not done:
                running.ended = running.ended or "timeout"
                await self._stop(running)
        except asyncio.CancelledError:  # the caller went away: so does the command
            await self._stop(running)
            raise
        finally:
            self._running.get(worker.name, set()).discard(running)
            running.done.set()
        code = -1
        if running.task.done() and not running.task.cancelled():
            error = running.task.exception()
            if error is not None and not running.ended:
                raise error
            if error is None:
                code = running.task.result()
        if not running.ended and (worker.container_id != container_id or worker.state != "running"):
            running.ended, code = "stopped", -1
        seconds = time.monotonic() - started
        response = pb.ExecResponse(exit_code=code, ended=running.ended, seconds=seconds)
        response.stdout, response.stdout_truncated = _read(out, limit)
        response.stderr, response.stderr_truncated = _read(err, limit)
        with contextlib.suppress(OSError):
            for path in (out, err, *base.iterdir()):
                path.unlink(missing_ok=True)
            base.rmdir()
        log.info("exec in %s on %s: %s -> exit %d%s in %.2fs", describe(actor), worker.name, list(req.command)[:8],
                 code, f" ({running.ended})" if running.ended else "", seconds)
        return response

    async def end(self, worker_name: str, why: str) -> int:
        """Ends every exec in flight on ``worker_name`` (each answers ``ended: why``) and returns
        once they are gone (at most ``END_GRACE_SECONDS`` each); returns how many there were."""
        running = list(self._running.get(worker_name, ()))
        for one in running:
            one.ended = one.ended or why
            await self._stop(one)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(one.done.wait(), END_GRACE_SECONDS)
        if running:
            log.info("ended %d exec(s) on %s: %s", len(running), worker_name, why)
        return len(running)

    @staticmethod
    async def _stop(running: _RunningExec) -> None:
        """Cancels the driver's exec (it kills the process) and waits for it."""
        if not running.task.done():
            running.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.shield(running.task), END_GRACE_SECONDS)


def _read(path: Path, limit: int) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of ``path`` and whether there was more (b'' when it is missing)."""
    try:
        with path.open("rb") as file:
            data = file.read(limit + 1)
    except OSError:
        return b"", False
    return data[:limit], len(data) > limit
