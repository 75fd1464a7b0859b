"""Exit events: what the node does when a sandbox exits on its own (crash, OOM kill; not one the
atelet stopped).

Every running sandbox has a watch task (``ExitWatcher.watch``); how the exit is noticed is the
driver's (``SandboxDriver.exit_watch``; for gVisor ``atelet.watch``, measured 5-100 ms after the
kill). Then the worker's state becomes ``exited`` (its actor, durable dirs and log are kept until a
Terminate; the dead sandbox itself is deleted from the runtime) and ``report(worker, actor,
reason)`` is called once. The atelet cancels the watch (``unwatch``) before it stops a sandbox
itself (Checkpoint, Terminate, fence, shutdown), so those are never reported.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from atelet.drivers import Drivers
from atelet.layout import NodeLayout
from atelet.workers import Worker, WorkerTable

log = logging.getLogger(__name__)

# (worker name, actor, one-line reason), once per sandbox that exits on its own.
ExitReport = Callable[[str, tuple[str, str], str], None]


class ExitWatcher:
    """The exit watches of the node's running sandboxes.

    Args:
        drivers: by sandbox class: notice the exits and delete the dead sandboxes.
        table: the workers (records and gauge updated on an exit).
        layout: where each actor's log lies (its last line goes into the reason).
        report: called once per sandbox that exits on its own.
    """

    def __init__(self, drivers: Drivers, table: WorkerTable, layout: NodeLayout, report: ExitReport) -> None:
        self.drivers = drivers
        self.table = table
        self.layout = layout
        self.report = report
        self._detached: set[asyncio.Task[Any]] = set()  # exit watches past their sandbox's death

    def watch(self, worker: Worker) -> None:
        """Starts the exit watch of the sandbox that now runs on ``worker``."""
        assert worker.container_id is not None and worker.actor is not None
        worker.watcher = asyncio.create_task(self._watch_exit(worker, worker.container_id, worker.actor),
                                             name=f"watch {worker.container_id}")

    async def unwatch(self, worker: Worker) -> None:
        """Cancels the worker's exit watch (the atelet is about to stop the sandbox itself)."""
        task, worker.watcher = worker.watcher, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def stop(self, workers: Iterable[Worker]) -> None:
        """At node stop: cancels every worker's watch, then lets the reports of sandboxes that exited
        just before out (waiting at most the drivers' longest ``exit_grace_seconds`` + 1 s)."""
        for worker in workers:
            await self.unwatch(worker)
        if self._detached:  # sandboxes that exited just before: let their events out (they end soon)
            await asyncio.wait(set(self._detached), timeout=max((d.exit_grace_seconds for d in self.drivers.values()), default=0) + 1)
            for task in list(self._detached):
                task.cancel()
            await asyncio.gather(*self._detached, return_exceptions=True)

    async def _watch_exit(self, worker: Worker, cid: str, actor: tuple[str, str]) -> None:
        """Phase 1 (cancelled when the atelet stops the sandbox): waits until the sandbox is gone and
        marks the worker ``exited``. Phase 2 (detached from the worker, never cancelled but by
        ``stop``): learns how it ended, records and reports that, and deletes the dead sandbox."""
        driver = self.drivers[worker.pool.sandbox_class]
        exit_watch = driver.exit_watch(cid)
        me = asyncio.current_task()
        assert me is not None
        try:
            try:
                await exit_watch.gone()
            except Exception:  # a broken watch must not take the worker down; leave it running
                log.exception("exit watch of %s on %s failed", cid, worker.name)
                return
            async with worker.lock:  # an operation on the worker finishes first; it may have stopped it
                if worker.container_id != cid or worker.state != "running":
                    return
                worker.watcher = None
                self._detached.add(me)
                worker.container_id, worker.state, worker.frozen = None, "exited", False
                worker.exit_reason = "exited on its own (finding out how)"
                self.table.persist(worker)
                self.table.update_metrics()
            log.warning("sandbox of %s/%s on %s exited on its own", *actor, worker.name)
            reason = await exit_watch.reason(self.layout.log_path(actor))
            if worker.actor == actor and worker.state == "exited" and worker.container_id is None:
                worker.exit_reason = reason
                self.table.persist(worker)
            log.warning("sandbox of %s/%s on %s: %s", *actor, worker.name, reason)
            self.report(worker.name, actor, reason)
            await exit_watch.close()
            await driver.delete_quietly(cid)
        finally:
            await asyncio.shield(exit_watch.close())
            self._detached.discard(me)
