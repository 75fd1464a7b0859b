"""Freeze and Thaw (issue 27, the hot tier): stopping a worker's sandbox in place and letting it
run again.

A frozen sandbox keeps its worker and its memory and uses no CPU; Thaw makes it run again within
milliseconds. How is the driver's (``SandboxDriver.freeze_in_place``): for gVisor the kernel's
cgroup freezer (``atelet.freezer``, ``runsc pause`` without one), for microvm QMP ``stop``. The
worker's state stays ``running`` with ``Worker.frozen`` set (Health's ``frozen``,
``ate_atelet_frozen_sandboxes``), and the worker's record says ``frozen`` so that a restarted atelet
adopts it frozen (``atelet.adoption``). The record is written before the freeze and after the
thaw: an atelet killed in between adopts the sandbox frozen (and freezes it again should it run),
never running while the control plane believes it frozen.

Other calls on a frozen sandbox: Checkpoint thaws it first (``atelet.checkpoint_ops``); Terminate,
fence and the node's stop thaw it before the kill (``SandboxRunner.stop``); its exit watch stays
armed (a frozen process lives); a repeated Run/Restore does not probe it (``SandboxOperations``).

Errors: NOT_FOUND (unknown worker), FAILED_PRECONDITION (the worker does not run the actor, its
sandbox exited, or it holds a checkpoint of it), UNAVAILABLE (the kernel did not freeze it in
time: it runs on; retryable), INTERNAL.
"""

from __future__ import annotations

import logging
import time

from atelet import metrics
from atelet.drivers import Drivers
from atelet.errors import precondition
from atelet.proto import atelet_pb2 as pb
from atelet.spec import actor_key
from atelet.workers import Worker, WorkerTable, describe

log = logging.getLogger(__name__)


class FreezeOperations:
    """Freeze and Thaw on the node's workers.

    Args:
        hollow: benchmark mode: accept calls, run no sandbox.
        table: the workers and their records.
        drivers: the runtime of each sandbox class.
    """

    def __init__(self, hollow: bool, table: WorkerTable, drivers: Drivers) -> None:
        self.hollow = hollow
        self.table = table
        self.drivers = drivers

    async def freeze(self, req: pb.FreezeRequest) -> pb.FreezeResponse:
        """Freezes ``req.actor``'s sandbox on ``req.worker``; answers ``already_frozen`` when it is.

        Returns:
            ``already_frozen``, ``freeze_seconds`` (until every task stopped) and ``method``.

        Raises:
            AteletError: see the module doc.
        """
        actor = actor_key(req.actor)
        worker = self.table.get(req.worker)
        async with worker.lock:
            self._check(worker, actor, "freeze")
            if worker.frozen:
                return pb.FreezeResponse(already_frozen=True)
            if worker.checkpoint is not None:
                raise precondition(f"worker {worker.name} holds checkpoint {worker.checkpoint.operation_id} of "
                                   f"{describe(actor)}; it is not frozen while that is pending")
            worker.frozen = True
            self.table.persist(worker)  # before the freeze: see the module doc
            if self.hollow:
                return pb.FreezeResponse(method="hollow")
            assert worker.container_id is not None
            start = time.monotonic()
            try:
                how = await self.drivers[worker.pool.sandbox_class].freeze_in_place(worker.container_id)
            except BaseException:
                worker.frozen = False
                self.table.persist(worker)
                raise
            seconds = time.monotonic() - start
            metrics.observe_freeze("freeze", how, seconds)
            log.info("froze %s on %s in %.1f ms (%s)", describe(actor), worker.name, seconds * 1000, how)
            return pb.FreezeResponse(freeze_seconds=seconds, method=how)

    async def thaw(self, req: pb.ThawRequest) -> pb.ThawResponse:
        """Lets ``req.actor``'s frozen sandbox on ``req.worker`` run again; answers
        ``was_frozen`` false when it was running.

        Returns:
            ``was_frozen``, ``thaw_seconds`` (until it runs) and ``method``.

        Raises:
            AteletError: see the module doc (it stays frozen when the thaw failed).
        """
        actor = actor_key(req.actor)
        worker = self.table.get(req.worker)
        async with worker.lock:
            self._check(worker, actor, "thaw")
            if not worker.frozen:
                return pb.ThawResponse(was_frozen=False)
            if self.hollow:
                worker.frozen = False
                self.table.persist(worker)
                return pb.ThawResponse(was_frozen=True, method="hollow")
            assert worker.container_id is not None
            start = time.monotonic()
            how = await self.drivers[worker.pool.sandbox_class].thaw_in_place(worker.container_id)
            seconds = time.monotonic() - start
            worker.frozen = False
            self.table.persist(worker)  # after the thaw: see the module doc
            metrics.observe_freeze("thaw", how or "none", seconds)
            log.info("thawed %s on %s in %.1f ms (%s)", describe(actor), worker.name, seconds * 1000,
                     how or "it ran")
            return pb.ThawResponse(was_frozen=True, thaw_seconds=seconds, method=how)

    @staticmethod
    def _check(worker: Worker, actor: tuple[str, str], what: str) -> None:
        """FAILED_PRECONDITION unless ``worker`` runs ``actor``'s sandbox."""
        if worker.actor != actor or worker.state != "running":
            raise precondition(f"cannot {what} {describe(actor)} on worker {worker.name}: it runs "
                               f"{describe(worker.actor)} (state {worker.state})")
