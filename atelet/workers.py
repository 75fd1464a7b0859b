"""The node's worker slots: what runs on each, its lock, and its record on disk.

Each worker is one network namespace (``atelet.netns``) that runs at most one actor's sandbox at a
time, guarded by a per-worker asyncio lock. Whenever what runs on a worker changes, it is persisted
(``WorkerTable.persist``, records in ``atelet.assignments``) so that a restarted atelet can adopt
the sandbox (``atelet.adoption``). Each worker's state (idle | running | exited) is also the
``ate_atelet_workers`` gauge (``atelet.metrics``); a running sandbox that is frozen (Freeze,
``atelet.freeze_ops``) keeps state ``running`` with ``frozen`` set, counted in
``ate_atelet_frozen_sandboxes``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from atelet import metrics, netns
from atelet.assignments import Assignment, AssignmentStore, PendingCheckpoint
from atelet.errors import not_found, precondition, unavailable
from atelet.layout import NodeLayout
from atelet.proto import atelet_pb2 as pb
from atelet.settings import AteletSettings
from domain.pools import WorkerPoolSpec


@dataclass
class Worker:
    """One worker slot: its pool, network and what runs on it (``actor`` None = idle)."""

    name: str
    pool: WorkerPoolSpec
    index: int
    net: netns.WorkerNet
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    actor: tuple[str, str] | None = None
    container_id: str | None = None
    state: str = "idle"  # idle | running | exited
    spec: pb.WorkloadSpec | None = None
    exit_reason: str = ""  # how the sandbox ended, when state is "exited" on its own
    watcher: asyncio.Task[None] | None = None  # the exit watch of the running sandbox
    inflight: int = 0  # Run/Restore/Checkpoint/Terminate calls in flight on this worker
    operation: tuple[str, str] | None = None  # (operation_id, kind) of the Run/Restore that started it
    started_at: float = 0.0
    adopted: bool = False  # the sandbox was started by an earlier atelet process
    checkpoint: PendingCheckpoint | None = None  # a checkpoint started and not yet committed
    settling: asyncio.Task[None] | None = None  # follows a checkpoint its caller no longer waits for
    frozen: bool = False  # the running sandbox is frozen (Freeze): no CPU until Thaw
    output_start: int = 0  # the size of the actor's log file when its sandbox started (not kept across restarts)

    def free(self) -> None:
        """Marks the worker idle (nothing runs on it); ``WorkerTable.free`` also forgets its record."""
        self.actor = None
        self.container_id = None
        self.state = "idle"
        self.spec = None
        self.exit_reason = ""
        self.operation = None
        self.started_at = 0.0
        self.adopted = False
        self.checkpoint = None
        self.frozen = False


def describe(actor: tuple[str, str] | None) -> str:
    """``actor demo/c1``, or ``nothing`` for None (for messages)."""
    return "nothing" if actor is None else f"actor {actor[0]}/{actor[1]}"


class WorkerTable:
    """Every worker of the node by name, planned from the pools (worker ``<pool>-<i>``, networks
    numbered across all pools in order), and their records.

    Args:
        settings: the node name and subnet plan the networks; in ``hollow`` mode nothing is persisted.
        pools: the worker pools, in order.
        layout: the state dir (paths written into the records).
        assignments: where the records go.
    """

    def __init__(self, settings: AteletSettings, pools: list[WorkerPoolSpec], layout: NodeLayout,
                 assignments: AssignmentStore) -> None:
        self.node = settings.node
        self.hollow = settings.hollow
        self.layout = layout
        self.assignments = assignments
        # the runtime build per sandbox class, stamped into each record; set by Node.start
        self.runtime_versions: dict[str, str] = {}
        self.by_name: dict[str, Worker] = {}
        self._starting: dict[tuple[str, str], str] = {}  # actor -> the worker starting it (claim)
        index = 0
        for pool in pools:
            for i in range(pool.replicas):
                name = f"{pool.name}-{i}"
                self.by_name[name] = Worker(name, pool, index, netns.plan(settings.node, name, index, settings.subnet))
                index += 1

    def runtime_version(self, worker: Worker) -> str:
        """The runtime build of ``worker``'s sandbox class ('' before ``Node.start``)."""
        return self.runtime_versions.get(worker.pool.sandbox_class, "")

    @property
    def runsc_version(self) -> str:
        """The gVisor build of this node ('' when it has no gvisor worker, or before ``Node.start``)."""
        return self.runtime_versions.get("gvisor", "")

    def get(self, name: str) -> Worker:
        """The worker ``name``.

        Raises:
            AteletError: NOT_FOUND naming the node's workers when there is no such worker.
        """
        worker = self.by_name.get(name)
        if worker is None:
            raise not_found(f"worker: no worker {name!r} on node {self.node} "
                            f"(workers: {', '.join(self.by_name) or 'none'})")
        return worker

    def elsewhere(self, worker: Worker, actor: tuple[str, str]) -> bool:
        """Whether another worker of the node than ``worker`` holds ``actor`` (running or exited):
        then the actor's durable dirs (the node's) are that worker's, and whatever ends the sandbox
        on ``worker`` leaves them."""
        return any(other.actor == actor for other in self.by_name.values() if other is not worker)

    @contextmanager
    def claim(self, worker: Worker, actor: tuple[str, str]) -> Iterator[None]:
        """Holds ``actor`` for ``worker`` while the block starts its sandbox: the worker must hold no
        actor, and no other worker of the node may run ``actor`` or be starting it. The actor's
        durable dirs are the node's (``NodeLayout.actor_dir``), so a second sandbox of it here
        would share them, and its start would empty them under the first (a resume that went on
        after a revert took its place over did exactly that).

        Raises:
            AteletError: FAILED_PRECONDITION naming what the worker runs; UNAVAILABLE (retryable)
                naming the other worker.
        """
        if worker.actor is not None:
            raise precondition(f"worker {worker.name} is busy: it runs {describe(worker.actor)} "
                               f"(state {worker.state}), wanted it for {describe(actor)}")
        elsewhere = self._starting.get(actor)
        if elsewhere is None:
            elsewhere = next((other.name for other in self.by_name.values()
                              if other is not worker and other.actor == actor and other.state == "running"), None)
        if elsewhere is not None and elsewhere != worker.name:
            raise unavailable(f"{describe(actor)} already runs on worker {elsewhere} of node {self.node}, and a "
                              f"second sandbox of it would share its durable dirs; the control plane has the "
                              f"node terminate a sandbox it no longer places at the node's next heartbeat: retry")
        self._starting[actor] = worker.name
        try:
            yield
        finally:
            del self._starting[actor]

    def persist(self, worker: Worker) -> None:
        """Records what runs on ``worker`` (removes the record when it is idle); not in hollow mode."""
        if self.hollow:
            return
        if worker.actor is None or worker.spec is None or worker.operation is None:
            self.assignments.remove(worker.name)
            return
        self.assignments.save(Assignment(
            worker=worker.name, actor=worker.actor, container_id=worker.container_id, state=worker.state,
            net=worker.net, spec=worker.spec, operation_id=worker.operation[0],
            operation_kind=worker.operation[1], durable_dir=str(self.layout.actor_dir(worker.actor)),
            volumes={k: str(v) for k, v in self.layout.volume_dirs(worker.actor, worker.spec).items()},
            log=str(self.layout.log_path(worker.actor)), bundle=str(self.layout.bundle_dir(worker.name)),
            exit_reason=worker.exit_reason, runsc_version=self.runtime_version(worker), started_at=worker.started_at,
            checkpoint=worker.checkpoint, frozen=worker.frozen,
        ))

    def free(self, worker: Worker) -> None:
        """Marks the worker idle and forgets its record."""
        worker.free()
        self.persist(worker)

    def update_metrics(self) -> None:
        """Sets the worker gauge from every worker's state, and the frozen sandboxes' gauge."""
        metrics.set_workers((w.pool.name, w.state) for w in self.by_name.values())
        metrics.set_frozen((w.pool.name, w.frozen and w.state == "running") for w in self.by_name.values())

    @contextmanager
    def inflight(self, worker_name: str) -> Iterator[None]:
        """Counts a call in ``worker_name``'s ``inflight`` while the block runs (no-op for an
        unknown or empty name)."""
        worker = self.by_name.get(worker_name)
        if worker is not None:
            worker.inflight += 1
        try:
            yield
        finally:
            if worker is not None:
                worker.inflight -= 1
