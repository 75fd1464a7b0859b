"""Booting and stopping the sandbox of one worker, over the sandbox class's driver.

``boot`` prepares the sandbox (driver), records it on the worker before it starts (so a crash from
then on leaves a record to adopt or clean up), starts it (driver), waits for its wakeup probe and
arms its exit watch; a failure deletes it and frees the worker. ``stop`` cancels the exit watch,
thaws a frozen sandbox (``Worker.frozen``: a v1-frozen one takes a SIGKILL only once thawed, and a
cgroup-frozen gVisor sandbox cannot answer runsc), kills the sandbox and records that, then
deletes it in the background (``settle`` waits for those deletes).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from atelet import probe
from atelet.drivers import Drivers
from atelet.errors import AteletError
from atelet.exits import ExitWatcher
from atelet.layout import NodeLayout
from atelet.proto import atelet_pb2 as pb
from atelet.restore_notice import tell_restored
from atelet.watch import last_log_line
from atelet.workers import Worker, WorkerTable

log = logging.getLogger(__name__)

DEFAULT_PROBE_TIMEOUT = 30.0  # seconds, when the request gives none


class SandboxRunner:
    """Boots and stops the workers' sandboxes.

    Args:
        drivers: the runtime of each sandbox class.
        table: the workers and their records.
        layout: actor dirs, logs and bundle dirs.
        exits: arms and cancels the exit watches.
    """

    def __init__(self, drivers: Drivers, table: WorkerTable, layout: NodeLayout, exits: ExitWatcher) -> None:
        self.drivers = drivers
        self.table = table
        self.layout = layout
        self.exits = exits
        self._deleting: set[asyncio.Task[None]] = set()
        # Called with the worker and the actor before its sandbox starts on its log file
        # (``OutputCollector.begin``: an overgrown, shipped file starts again empty, inherited lines
        # are read). Set by the atelet's main.
        self.before_launch: Callable[[Worker, tuple[str, str]], None] | None = None

    async def boot(self, worker: Worker, actor: tuple[str, str], spec: pb.WorkloadSpec,
                   image_path: Path | None, probe_timeout: float, operation: tuple[str, str],
                   notice: pb.RestoreNotice | None = None) -> tuple[float, float]:
        """Starts (``image_path`` None) or restores the sandbox, waits for its probe, and with a
        ``notice`` (a restore) tells its post_restore hooks what it was restored from.

        Args:
            worker: an idle worker, its lock held by the caller.
            actor: ``(atespace, name)`` of the actor to run.
            spec: its validated workload.
            image_path: the ``checkpoint/`` dir of a FULL snapshot to restore, or None.
            probe_timeout: seconds to wait for the wakeup probe (0: ``DEFAULT_PROBE_TIMEOUT``).
            operation: (operation_id, kind) of the Run/Restore, recorded on the worker.
            notice: what a restore's post_restore hooks are told (``atelet.restore_notice``).

        Returns:
            (boot seconds, probe seconds). On failure the sandbox is deleted and the worker freed.

        Raises:
            AteletError: from the driver, UNAVAILABLE when the probe does not answer in time, or
                FAILED_PRECONDITION when a post_restore hook refuses.
        """
        container = spec.containers[0]
        driver = self.drivers[worker.pool.sandbox_class]
        prepared = await driver.prepare(self.layout.bundle_dir(worker.name), worker.net, spec,
                                             self.layout.volume_dirs(actor, spec), actor[1])
        cid = f"{worker.name}-{uuid.uuid4().hex[:10]}"
        worker.actor, worker.spec, worker.container_id, worker.state = actor, spec, cid, "running"
        worker.operation, worker.started_at, worker.adopted = operation, time.time(), False
        try:
            self.table.persist(worker)  # before the sandbox starts: a crash from here on leaves a record
            if self.before_launch is not None:
                self.before_launch(worker, actor)
            log_path = self.layout.log_path(actor)
            worker.output_start = log_path.stat().st_size if log_path.exists() else 0
            start = time.monotonic()
            await driver.launch(cid, worker.net, prepared, self.layout.log_path(actor), image_path)
            boot = time.monotonic() - start
            probe_seconds = 0.0
            if container.wakeup_probe.port:
                try:
                    probe_seconds = await probe.wait_ready(worker.net.worker_ip, container.wakeup_probe.port,
                                                           container.wakeup_probe.path or "/",
                                                           probe_timeout or DEFAULT_PROBE_TIMEOUT,
                                                           container=container.name, retryable=False)
                except AteletError as error:
                    # What the workload said last tells why it never answered (a crash at start,
                    # a port it does not listen on) better than the probe can.
                    line = last_log_line(self.layout.log_path(actor))
                    if not line:
                        raise
                    raise AteletError(error.code, f"{error.reason}; last log line: {line}") from error
            if notice is not None:
                await tell_restored(worker.net.worker_ip, actor, spec, notice)
            self.exits.watch(worker)
            return boot, probe_seconds
        except BaseException:
            try:
                await driver.delete(cid)
            finally:
                shutil.rmtree(self.layout.actor_dir(actor), ignore_errors=True)
                self.table.free(worker)
            raise

    async def stop(self, worker: Worker, *, already_exited: bool = False) -> bool:
        """Stops the worker's sandbox if any (True when one existed); the driver's delete then runs in
        the background, since the sandbox is already dead and delete may wait ~1 s for its reaping.

        Args:
            worker: its lock held by the caller.
            already_exited: the sandbox is known dead (a FULL checkpoint ended it): kill nothing.

        Returns:
            True when a sandbox was there. The worker keeps its actor (state ``exited``) or is idle.
        """
        await self.exits.unwatch(worker)
        cid = worker.container_id
        if cid is None:
            return False
        existed = True
        driver = self.drivers[worker.pool.sandbox_class]
        if worker.frozen and not already_exited:
            try:
                await driver.thaw_in_place(cid)
            except AteletError as error:  # the driver's kill thaws what it must itself; say why here
                log.warning("thaw of the frozen sandbox %s before its stop failed: %s", cid, error.reason)
            worker.frozen = False
            self.table.persist(worker)
        if not already_exited:
            try:
                existed = await driver.kill(cid)
            except BaseException:
                if await driver.alive(cid):
                    raise  # it still runs: nothing changed
                # gone although the kill reported a failure (e.g. a VM's durable dir not read
                # back): the worker must say so, or it would stay "running" with nothing on it
                worker.container_id = None
                worker.state = "exited" if worker.actor else "idle"
                self.table.persist(worker)
                raise
        worker.container_id = None
        worker.state = "exited" if worker.actor else "idle"
        self.table.persist(worker)
        task = asyncio.create_task(driver.delete_quietly(cid))
        self._deleting.add(task)
        task.add_done_callback(self._deleting.discard)
        return existed

    async def settle(self) -> None:
        """Waits for the background deletes ``stop`` started (their failures are logged by the driver)."""
        await asyncio.gather(*self._deleting, return_exceptions=True)
