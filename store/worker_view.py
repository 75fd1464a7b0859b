"""The worker view: the worker index (`store.worker_index`) of the process that places (the
Temporal worker's activities), loaded from Postgres and kept fresh by LISTEN/NOTIFY, so that
choosing a worker reads no table (ARCHITECTURE.md, "Placement": "filtering reads an in-memory
worker cache kept fresh by Postgres LISTEN/NOTIFY, not a table scan").

- Loaded whole (`view_workers`) before the first placement, again whenever its LISTEN connection
  is re-made, and every `resync_seconds` (what a lost notification could have missed).
- Kept fresh by `ate_worker_changes` (migrations 0001 and 0008): a worker row (its runtime
  included, 0011, and the resume it is kept for, 0014), a place on it, or its node's runsc build (the runtime of a worker whose atelet
  reports none) changed; the named workers are read again by index (`view_some_workers`).
- A worker a bind of this process holds is read again once the commit is announced or the hold
  expires; `sync` waits until every change committed before it is in the view.

The view may be stale; it never decides alone: the bind locks the worker row and checks it again
(`Placement.place`). A stale view costs a retry with another candidate, never an overbooked
worker or a bind to a worker that left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Callable
from typing import Any

import asyncpg

from domain.changes import WORKER_CHANGES_CHANNEL
from domain.placement import Usage, WorkerShape
from store.sql import QUERIES as Q
from store.worker_index import HOLD_SECONDS, ViewedWorker, WorkerIndex

__all__ = ["CHANNEL", "HOLD_SECONDS", "READY_SECONDS", "RESYNC_SECONDS", "ViewedWorker", "WorkerView"]

log = logging.getLogger(__name__)

CHANNEL = WORKER_CHANGES_CHANNEL
"""The channel worker, place and node changes are announced on (payload: a worker id,
`place <worker id> <holder>` for a new place, `node <name>`, or `sync <token>` for `WorkerView.sync`)."""

RESYNC_SECONDS = 30.0
"""Between two full loads of the view."""

READY_SECONDS = 10.0
"""How long a placement waits for the view to be (re)loaded before it fails (and is retried)."""


def worker_shape(row: asyncpg.Record) -> WorkerShape:
    """The shape placement checks of a worker row with its runtime (`view_workers`, `view_some_workers`,
    `pressure_candidates`: id, node, state, state_reason, router_drain_id, sandbox_class, labels,
    places, cpu_millis, memory_bytes, runsc_version)."""
    return WorkerShape.of(
        state=row["state"],
        sandbox_class=row["sandbox_class"],
        labels=row["labels"] or {},
        runsc_version=row["runsc_version"],
        places=int(row["places"]),
        cpu_millis=int(row["cpu_millis"]),
        memory_bytes=int(row["memory_bytes"]),
        drain_held=row["router_drain_id"] is not None,
        node=str(row["node"]),
        state_reason=row["state_reason"],
    )


def _row_worker(row: asyncpg.Record, now: float) -> ViewedWorker:
    """A `view_workers` row as the view holds it (`now`: the view's clock, for the reservation)."""
    reserved_for = row["reserved_for"]
    return ViewedWorker(
        worker_id=int(row["id"]),
        node=str(row["node"]),
        name=str(row["name"]),
        shape=worker_shape(row),
        used=Usage(int(row["used_places"]), int(row["used_cpu"]), int(row["used_memory"])),
        reserved_for=reserved_for,
        reserved_until=now + float(row["reserved_seconds"] or 0.0) if reserved_for is not None else 0.0,
    )


class WorkerView(WorkerIndex):
    """The worker index of this process, kept fresh from Postgres (see the module docstring).

    Args:
        pool: the store's pool; the view holds one of its connections for LISTEN.
        resync_seconds: between two full loads.
        rng: the randomness of the sample of two (a seeded one in tests that replay a choice).
        clock: monotonic seconds (holds expire on it).
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        resync_seconds: float = RESYNC_SECONDS,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(rng=rng, clock=clock)
        self.pool = pool
        self.resync_seconds = resync_seconds
        self._pending_ids: set[int] = set()
        self._pending_nodes: set[str] = set()
        self._barriers: dict[str, asyncio.Future[None]] = {}
        self._arrived: list[str] = []
        self._to_send: list[str] = []
        self._wake = asyncio.Event()
        self._fresh = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.listener_pid: int | None = None
        """The server process of the LISTEN connection while the view holds one."""

    def hold(self, worker_id: int, usage: Usage, holder: str) -> None:
        """A bind of this process on the worker for `holder`: count it until its commit is
        announced (or HOLD_SECONDS pass, then the worker is read again)."""
        if worker_id in self.workers:
            super().hold(worker_id, usage, holder)
            self._wake.set()

    def refresh(self, worker_id: int) -> None:
        """Read the worker again soon (a bind found it other than the view said)."""
        self._pending_ids.add(worker_id)
        self._wake.set()

    # -- keeping it fresh ------------------------------------------------------------------

    async def ready(self) -> None:
        """Start the view if it is not running and wait until it is loaded and listening.

        Raises:
            TimeoutError: it could not be (re)loaded within READY_SECONDS (Postgres unreachable).
        """
        if self._task is None or self._task.done():
            self._closing = False
            self._task = asyncio.create_task(self._run(), name="worker-view")
        if not self._fresh.is_set():
            async with asyncio.timeout(READY_SECONDS):
                await self._fresh.wait()

    async def sync(self, timeout: float = READY_SECONDS) -> None:
        """Wait until every change committed before this call is in the view (a NOTIFY of our own
        travels behind them: notifications arrive in commit order). Best effort: returns after
        `timeout` without raising."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.ready()
                token = uuid.uuid4().hex
                arrived = asyncio.get_running_loop().create_future()
                self._barriers[token] = arrived
                self._to_send.append(token)  # sent on the LISTEN connection: no pool connection needed
                self._wake.set()
                try:
                    await arrived
                finally:
                    self._barriers.pop(token, None)

    async def close(self) -> None:
        """Stop listening and give the connection back (before the pool closes)."""
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._fresh.clear()

    async def _fetch_all(self, connection: asyncpg.Connection) -> tuple[list[asyncpg.Record], list[str]]:
        """Every worker, and the syncs waiting when the read started (it is newer than they are)."""
        waiting = list(self._barriers)
        return list(await connection.fetch(Q["view_workers"])), waiting

    def _load_all_then_release(self, read: tuple[list[asyncpg.Record], list[str]]) -> None:
        rows, waiting = read
        now = self.clock()
        self.apply_all(_row_worker(row, now) for row in rows)
        for token in waiting:
            barrier = self._barriers.get(token)
            if barrier is not None and not barrier.done():
                barrier.set_result(None)

    def _notified(self, _connection: Any, _pid: int, _channel: str, payload: str) -> None:
        kind, _, rest = payload.partition(" ")
        if kind == "place":  # a new place committed: a hold of ours for it is seen now
            worker, _, holder = rest.partition(" ")
            if worker.isdigit():
                worker_id = int(worker)
                self.committed(worker_id, holder)
                self._pending_ids.add(worker_id)
        elif kind == "node":
            self._pending_nodes.add(rest)
        elif kind == "sync":
            self._arrived.append(rest)
        elif kind.isdigit():
            self._pending_ids.add(int(kind))
        self._wake.set()

    def _terminated(self, _connection: Any) -> None:
        self._fresh.clear()
        self._wake.set()

    async def _run(self) -> None:
        """Hold a LISTEN connection; load, then apply notifications; re-make it when it breaks."""
        backoff = 0.1
        while not self._closing:
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a lost connection, Postgres restarting: load again
                self._fresh.clear()
                log.warning("worker view: %s; loading it again in %.1f s", error, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            else:
                backoff = 0.1

    async def _listen(self) -> None:
        connection: asyncpg.Connection = await self.pool.acquire()
        try:
            self.listener_pid = connection.get_server_pid()
            connection.add_termination_listener(self._terminated)
            await connection.add_listener(CHANNEL, self._notified)
            self._pending_ids.clear()
            self._pending_nodes.clear()
            self._load_all_then_release(await self._fetch_all(connection))
            log.info("worker view: %d workers on %d nodes loaded", len(self.workers), len(self.nodes))
            self._fresh.set()
            resync_at = self.clock() + self.resync_seconds
            while not self._closing:
                now = self.clock()
                wait = min([resync_at - now, *(t - now for t in self.hold_deadlines())])
                if wait > 0 and not (self._pending_ids or self._pending_nodes or self._arrived or self._to_send):
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):
                            await self._wake.wait()
                self._wake.clear()
                if connection.is_closed():
                    raise ConnectionError("the LISTEN connection closed")
                to_send, self._to_send = self._to_send, []
                for token in to_send:  # autocommit: delivered behind every change committed before
                    await connection.execute("SELECT pg_notify($1, $2)", CHANNEL, f"sync {token}")
                arrived, self._arrived = self._arrived, []
                now = self.clock()
                if now >= resync_at:
                    self._pending_ids.clear()
                    self._pending_nodes.clear()
                    self._load_all_then_release(await self._fetch_all(connection))
                    resync_at = now + self.resync_seconds
                expired = self.expired_holds(now)
                ids, nodes = self._pending_ids | expired, set(self._pending_nodes)
                self._pending_ids.clear()
                self._pending_nodes.clear()
                if ids or nodes:
                    rows = await connection.fetch(Q["view_some_workers"], sorted(ids), sorted(nodes))
                    self.apply((_row_worker(row, self.clock()) for row in rows), ids, nodes)
                for token in arrived:
                    barrier = self._barriers.get(token)
                    if barrier is not None and not barrier.done():
                        barrier.set_result(None)
        finally:
            self._fresh.clear()
            self.listener_pid = None
            with contextlib.suppress(Exception):
                connection.remove_termination_listener(self._terminated)
                if not connection.is_closed():
                    await connection.remove_listener(CHANNEL, self._notified)
            await self.pool.release(connection)
