"""The worker view: every worker as placement sees it, in the memory of the process that places
(the Temporal worker's activities), so that choosing a worker reads no table and costs the same
with 10 workers or 10,000 (ARCHITECTURE.md, "Placement": "filtering reads an in-memory worker
cache kept fresh by Postgres LISTEN/NOTIFY, not a table scan").

- Loaded whole (`view_workers`) before the first placement, again whenever its LISTEN connection
  is re-made, and every `resync_seconds` (what a lost notification could have missed).
- Kept fresh by `ate_worker_changes` (migrations 0001 and 0008): a worker row (its runtime
  included, 0011), a place on it, or its node's runsc build (the runtime of a worker whose atelet
  reports none) changed; the named workers are read again by index (`view_some_workers`).
- Workers are grouped by `WorkerShape` (a pool with one runtime), with the idle ones of
  each shape in an indexed set: a placement tests each shape once and samples two idle workers of
  the shapes that fit, whatever the number of workers; a pinned placement looks at its node's
  workers only.
- A bind this process made is held in the view at once (`hold`) until its commit shows (or a few
  seconds pass), so the next placement does not pick the same worker or misjudge its node's load.

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
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from domain.changes import WORKER_CHANGES_CHANNEL
from domain.placement import Demand, NodeLoad, Tally, Usage, WorkerShape, fits
from store.sql import QUERIES as Q

log = logging.getLogger(__name__)

CHANNEL = WORKER_CHANGES_CHANNEL
"""The channel worker, place and node changes are announced on (payload: a worker id,
`place <worker id> <holder>` for a new place, `node <name>`, or `sync <token>` for `WorkerView.sync`)."""

RESYNC_SECONDS = 30.0
"""Between two full loads of the view."""

HOLD_SECONDS = 5.0
"""How long a bind of this process is held in the view without its commit showing (a bind whose
transaction rolled back announces nothing: the view reads the worker again after this)."""

READY_SECONDS = 10.0
"""How long a placement waits for the view to be (re)loaded before it fails (and is retried)."""


@dataclass
class ViewedWorker:
    """One worker as the view holds it: `used` as last read, `held` what a bind of this process
    added that the view has not seen committed yet."""

    worker_id: int
    node: str
    name: str
    shape: WorkerShape
    used: Usage
    held: Usage | None = None

    @property
    def usage(self) -> Usage:
        """What its places hold, this process's uncommitted bind included."""
        return self.used + self.held if self.held is not None else self.used

    @property
    def idle(self) -> bool:
        """Whether no place of it is taken (a worker hosts one actor)."""
        return self.usage.places == 0


class _IndexedSet:
    """Worker ids with O(1) add, remove and uniform pick."""

    def __init__(self) -> None:
        self.items: list[int] = []
        self.index: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.items)

    def add(self, item: int) -> None:
        if item not in self.index:
            self.index[item] = len(self.items)
            self.items.append(item)

    def remove(self, item: int) -> None:
        at = self.index.pop(item, None)
        if at is None:
            return
        last = self.items.pop()
        if at < len(self.items):
            self.items[at] = last
            self.index[last] = at


@dataclass
class _Bucket:
    """The workers of one shape: how many, and which are idle."""

    count: int = 0
    idle: _IndexedSet = field(default_factory=_IndexedSet)


@dataclass
class _Node:
    """The workers of one node and their summed capacity and usage."""

    workers: set[int] = field(default_factory=set)
    load: NodeLoad = field(default_factory=NodeLoad)


def _row_worker(row: asyncpg.Record) -> ViewedWorker:
    return ViewedWorker(
        worker_id=int(row["id"]),
        node=str(row["node"]),
        name=str(row["name"]),
        shape=WorkerShape.of(
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
        ),
        used=Usage(int(row["used_places"]), int(row["used_cpu"]), int(row["used_memory"])),
    )


class WorkerView:
    """The workers as placement sees them (see the module docstring).

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
        self.pool = pool
        self.resync_seconds = resync_seconds
        self.rng = rng or random.Random()
        self.clock = clock
        self.workers: dict[int, ViewedWorker] = {}
        self.buckets: dict[WorkerShape, _Bucket] = {}
        self.nodes: dict[str, _Node] = {}
        self.loads = 0
        """Full loads so far (tests and the log read it)."""
        self._holds: dict[int, tuple[float, str]] = {}
        """worker id -> (until when, holder) of the binds this process made and has not seen committed."""
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

    # -- the index -------------------------------------------------------------------------

    def _index(self, w: ViewedWorker) -> None:
        bucket = self.buckets.setdefault(w.shape, _Bucket())
        bucket.count += 1
        if w.idle:
            bucket.idle.add(w.worker_id)
        node = self.nodes.setdefault(w.node, _Node())
        node.workers.add(w.worker_id)
        node.load.capacity += Usage(w.shape.places, w.shape.cpu_millis, w.shape.memory_bytes)
        node.load.used += w.usage

    def _unindex(self, w: ViewedWorker) -> None:
        bucket = self.buckets[w.shape]
        bucket.count -= 1
        bucket.idle.remove(w.worker_id)
        if bucket.count == 0:
            del self.buckets[w.shape]
        node = self.nodes[w.node]
        node.workers.discard(w.worker_id)
        node.load.capacity -= Usage(w.shape.places, w.shape.cpu_millis, w.shape.memory_bytes)
        node.load.used -= w.usage
        if not node.workers:
            del self.nodes[w.node]

    def _put(self, w: ViewedWorker) -> None:
        """Replace what the view holds of a worker by a fresh read; a hold of this process stays
        until its commit was announced (then the read includes it) or it expires."""
        old = self.workers.get(w.worker_id)
        if old is not None:
            self._unindex(old)
            if old.held is not None and self._holding(w.worker_id):
                w.held = old.held
            else:
                self._holds.pop(w.worker_id, None)
        self.workers[w.worker_id] = w
        self._index(w)

    def _drop(self, worker_id: int) -> None:
        old = self.workers.pop(worker_id, None)
        if old is not None:
            self._unindex(old)
        self._holds.pop(worker_id, None)

    def _apply(self, rows: Iterable[asyncpg.Record], asked_ids: set[int], asked_nodes: set[str]) -> None:
        """Apply a read of the workers `asked_*` named: what it returned is put, the rest dropped."""
        seen: set[int] = set()
        for row in rows:
            w = _row_worker(row)
            seen.add(w.worker_id)
            self._put(w)
        gone = {i for i in asked_ids if i not in seen}
        for name in asked_nodes:
            node = self.nodes.get(name)
            if node is not None:
                gone |= {i for i in node.workers if i not in seen}
        for worker_id in gone:
            self._drop(worker_id)

    def _apply_all(self, rows: Iterable[asyncpg.Record]) -> None:
        held = {i: w.held for i, w in self.workers.items() if w.held is not None}
        self.workers, self.buckets, self.nodes = {}, {}, {}
        for row in rows:
            w = _row_worker(row)
            if w.worker_id in held and self._holding(w.worker_id):
                w.held = held[w.worker_id]
            else:
                self._holds.pop(w.worker_id, None)
            self.workers[w.worker_id] = w
            self._index(w)
        self.loads += 1

    # -- what placement asks ---------------------------------------------------------------

    def sample(self, demand: Demand, excluded: set[int], k: int = 2) -> list[ViewedWorker]:
        """Up to `k` distinct idle workers passing every check, uniformly at random, none in
        `excluded`. Costs one test per shape (or per worker of the pinned node), not per worker."""
        if demand.node is not None:
            node = self.nodes.get(demand.node)
            found = [
                w
                for i in sorted(node.workers if node else ())
                if i not in excluded and (w := self.workers[i]).idle and fits(w.shape, demand)
            ]
            return self.rng.sample(found, min(k, len(found)))
        sets = [b.idle for shape, b in self.buckets.items() if len(b.idle) and fits(shape, demand)]
        total = sum(len(s) for s in sets)
        chosen: dict[int, ViewedWorker] = {}
        worker_id = -1
        for _ in range(8 * k):
            if len(chosen) == k or total == 0:
                break
            at = self.rng.randrange(total)
            for s in sets:
                if at < len(s):
                    worker_id = s.items[at]
                    break
                at -= len(s)
            if worker_id not in excluded:
                chosen[worker_id] = self.workers[worker_id]
        if len(chosen) < k and total <= len(excluded) + 8 * k:  # nearly all excluded: enumerate
            rest = [i for s in sets for i in s.items if i not in excluded and i not in chosen]
            for worker_id in self.rng.sample(rest, min(k - len(chosen), len(rest))):
                chosen[worker_id] = self.workers[worker_id]
        return list(chosen.values())

    def load(self, worker: ViewedWorker, demand: Demand) -> float:
        """The load that decides between two candidates: its node's fullest dimension after the
        bind (`domain.placement`, "Load")."""
        return self.nodes[worker.node].load.after(demand)

    def tally(self, demand: Demand) -> Tally:
        """How many workers each check removes (for the "no room" message); one step per shape,
        plus the pinned node's workers."""
        tally = Tally()
        on_node: Counter[tuple[WorkerShape, bool]] = Counter()
        if demand.node is not None and demand.node in self.nodes:
            for i in self.nodes[demand.node].workers:
                w = self.workers[i]
                on_node[(w.shape, w.idle)] += 1
        for shape, bucket in self.buckets.items():
            busy = Usage(shape.places, 0, 0)
            idle_here, busy_here = on_node[(shape, True)], on_node[(shape, False)]
            elsewhere = demand.node is None
            tally.add(shape, elsewhere, Usage(), demand, len(bucket.idle) - idle_here)
            tally.add(shape, elsewhere, busy, demand, bucket.count - len(bucket.idle) - busy_here)
            tally.add(shape, True, Usage(), demand, idle_here)
            tally.add(shape, True, busy, demand, busy_here)
        return tally

    def hold(self, worker_id: int, usage: Usage, holder: str) -> None:
        """A bind of this process on the worker for `holder`: count it until its commit is
        announced (or HOLD_SECONDS pass)."""
        w = self.workers.get(worker_id)
        if w is None:
            return
        self._unindex(w)
        w.held = usage
        self._index(w)
        self._holds[worker_id] = (self.clock() + HOLD_SECONDS, holder)
        self._wake.set()

    def _holding(self, worker_id: int) -> bool:
        """Whether a hold on the worker still stands (not announced committed, not expired)."""
        hold = self._holds.get(worker_id)
        return hold is not None and hold[0] > self.clock()

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
        self._apply_all(rows)
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
                hold = self._holds.get(worker_id)
                if hold is not None and hold[1] == holder:
                    self._holds[worker_id] = (0.0, holder)
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
                wait = min([resync_at - now, *(t - now for t, _ in self._holds.values())])
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
                expired = {i for i, (t, _) in self._holds.items() if t <= now}
                ids, nodes = self._pending_ids | expired, set(self._pending_nodes)
                self._pending_ids.clear()
                self._pending_nodes.clear()
                if ids or nodes:
                    rows = await connection.fetch(Q["view_some_workers"], sorted(ids), sorted(nodes))
                    self._apply(rows, ids, nodes)
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
