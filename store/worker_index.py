"""The worker index: every worker as placement sees it, held in memory and grouped so that
choosing a worker reads no table and costs the same with 10 workers or 10,000 (ARCHITECTURE.md,
"Placement").

- Workers are grouped by `WorkerShape` (a pool with one runtime), with the idle ones of each
  shape in an indexed set: a placement tests each shape once and samples two idle workers of the
  shapes that fit, whatever the number of workers (`sample`); a pinned placement looks at its
  node's workers only. Each node's summed capacity and usage give the load that decides between
  two candidates (`load`), and `tally` says which check removed how many workers.
- A bind this process made is held at once (`hold`) until its commit shows (or HOLD_SECONDS
  pass), so the next placement does not pick the same worker or misjudge its node's load.
- A worker kept for one resume (`reserved_for`: a pressure move is emptying it for that resume,
  `store.pressure`) is no candidate for anyone else while it stands: it is not among its shape's
  idle workers, and its holder finds it with `reserved_workers`. It is read again when the
  reservation runs out.

It is pure memory: `store.worker_view.WorkerView` fills it from Postgres and keeps it fresh.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from domain.placement import Demand, NodeLoad, Tally, Usage, WorkerShape, fits

HOLD_SECONDS = 5.0
"""How long a bind of this process is held in the index without its commit showing (a bind whose
transaction rolled back announces nothing: the view reads the worker again after this)."""

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
    reserved_for: str | None = None
    """The holder of the resume this worker is kept for (None: anyone's)."""
    reserved_until: float = 0.0
    """Until when (clock seconds) it is kept."""

    @property
    def usage(self) -> Usage:
        """What its places hold, this process's uncommitted bind included."""
        return self.used + self.held if self.held is not None else self.used

    @property
    def idle(self) -> bool:
        """Whether no place of it is taken (a worker hosts one actor)."""
        return self.usage.places == 0

    @property
    def available(self) -> bool:
        """Whether any placement may take it: idle and kept for no one."""
        return self.idle and self.reserved_for is None


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


class WorkerIndex:
    """The workers as placement sees them (see the module docstring).

    Args:
        rng: the randomness of the sample of two (a seeded one in tests that replay a choice).
        clock: monotonic seconds (holds expire on it).
    """

    def __init__(self, *, rng: random.Random | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.rng = rng or random.Random()
        self.clock = clock
        self.workers: dict[int, ViewedWorker] = {}
        self.buckets: dict[WorkerShape, _Bucket] = {}
        self.nodes: dict[str, _Node] = {}
        self.loads = 0
        """Full loads so far (tests and the log read it)."""
        self._holds: dict[int, tuple[float, str]] = {}
        """worker id -> (until when, holder) of the binds this process made and has not seen committed."""
        self._reserved: dict[str, set[int]] = {}
        """holder -> the workers kept for its resume."""

    # -- the index -------------------------------------------------------------------------

    def _index(self, w: ViewedWorker) -> None:
        bucket = self.buckets.setdefault(w.shape, _Bucket())
        bucket.count += 1
        if w.available:
            bucket.idle.add(w.worker_id)
        if w.reserved_for is not None:
            self._reserved.setdefault(w.reserved_for, set()).add(w.worker_id)
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
        if w.reserved_for is not None:
            kept = self._reserved.get(w.reserved_for, set())
            kept.discard(w.worker_id)
            if not kept:
                self._reserved.pop(w.reserved_for, None)
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

    def apply(self, read: Iterable[ViewedWorker], asked_ids: set[int], asked_nodes: set[str]) -> None:
        """Apply a read of the workers `asked_*` named (by id, or all of a node's): what it returned
        is put, the rest dropped."""
        seen: set[int] = set()
        for w in read:
            seen.add(w.worker_id)
            self._put(w)
        gone = {i for i in asked_ids if i not in seen}
        for name in asked_nodes:
            node = self.nodes.get(name)
            if node is not None:
                gone |= {i for i in node.workers if i not in seen}
        for worker_id in gone:
            self._drop(worker_id)

    def apply_all(self, read: Iterable[ViewedWorker]) -> None:
        """Replace the whole index by a read of every worker (the holds that still stand are kept)."""
        held = {i: w.held for i, w in self.workers.items() if w.held is not None}
        self.workers, self.buckets, self.nodes, self._reserved = {}, {}, {}, {}
        for w in read:
            if w.worker_id in held and self._holding(w.worker_id):
                w.held = held[w.worker_id]
            else:
                self._holds.pop(w.worker_id, None)
            self.workers[w.worker_id] = w
            self._index(w)
        self.loads += 1

    # -- what placement asks ---------------------------------------------------------------

    def reserved_workers(self, holder: str, demand: Demand, excluded: set[int]) -> list[ViewedWorker]:
        """The idle workers kept for `holder`'s resume that pass every check for `demand`, none in
        `excluded` (by id, so the choice replays)."""
        found = []
        for i in sorted(self._reserved.get(holder, ())):
            w = self.workers[i]
            if i not in excluded and w.idle and fits(w.shape, demand) and demand.node in (None, w.node):
                found.append(w)
        return found

    def has_reservations(self, holder: str) -> bool:
        """Whether some worker is kept for `holder`'s resume, as the view last read it."""
        return holder in self._reserved

    def sample(self, demand: Demand, excluded: set[int], k: int = 2) -> list[ViewedWorker]:
        """Up to `k` distinct available workers (idle, kept for no one) passing every check,
        uniformly at random, none in `excluded`. Costs one test per shape (or per worker of the
        pinned node), not per worker."""
        if demand.node is not None:
            node = self.nodes.get(demand.node)
            found = [
                w
                for i in sorted(node.workers if node else ())
                if i not in excluded and (w := self.workers[i]).available and fits(w.shape, demand)
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
                on_node[(w.shape, w.available)] += 1
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

    def _holding(self, worker_id: int) -> bool:
        """Whether a hold on the worker still stands (not announced committed, not expired)."""
        hold = self._holds.get(worker_id)
        return hold is not None and hold[0] > self.clock()

    def committed(self, worker_id: int, holder: str) -> None:
        """A new place on the worker for `holder` was announced committed: a hold of this process
        for it ends (the next read of the worker includes the place)."""
        hold = self._holds.get(worker_id)
        if hold is not None and hold[1] == holder:
            self._holds[worker_id] = (0.0, holder)

    def hold_deadlines(self) -> list[float]:
        """When each standing hold or reservation expires (clock seconds): the worker is then
        read again."""
        reservations = [self.workers[i].reserved_until for kept in self._reserved.values() for i in kept]
        return [t for t, _ in self._holds.values()] + reservations

    def expired_holds(self, now: float) -> set[int]:
        """The workers whose hold expired by `now` (or was announced committed), or whose
        reservation ran out."""
        expired = {i for i, (t, _) in self._holds.items() if t <= now}
        return expired | {i for kept in self._reserved.values() for i in kept if self.workers[i].reserved_until <= now}
