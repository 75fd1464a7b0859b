"""The api-server's liveness watcher: finds silent nodes and UNREACHABLE actors whose grace ran out
(domain/liveness.py, `store.liveness`).

Every `every_seconds` it marks the nodes without a heartbeat for the lease lost (workers
UNAVAILABLE, RUNNING actors UNREACHABLE) and the UNREACHABLE actors past their grace CRASHED.

It only trusts a silence it could have heard: heartbeats land through an api-server into
PostgreSQL, so while this process was not running, could not reach the database, or stood still
(its event loop blocked), a node may have beaten in vain. After each of those it listens for a
whole lease before it marks anything, so a restarted api-server never takes the heartbeats it
missed for dead nodes (no window in which placement finds every worker UNAVAILABLE while the
atelets are alive). Idempotent, so several api-servers may run it at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from api.metrics import NODES_LOST, UNREACHABLE_EXPIRED
from domain.liveness import LIVENESS_CHECK_SECONDS, NODE_LEASE_SECONDS, UNREACHABLE_GRACE_SECONDS
from store.interfaces import LivenessStore

log = logging.getLogger("ate.api.liveness")

STALL_SECONDS = 1.0
"""A tick later than planned by more than this means this process stood still: listen again."""


@dataclass
class LivenessWatcher:
    """Marks lost nodes and expires graces; `run` loops forever, `tick` is one round.

    Args:
        store: the control plane's store.
        lease_seconds: a node silent this long is lost.
        grace_seconds: an UNREACHABLE actor waits this long for its node.
        every_seconds: the interval between rounds.
    """

    store: LivenessStore
    lease_seconds: float = NODE_LEASE_SECONDS
    grace_seconds: float = UNREACHABLE_GRACE_SECONDS
    every_seconds: float = LIVENESS_CHECK_SECONDS
    listening_since: float | None = field(default=None, init=False)
    """`time.monotonic()` since which this watcher could have heard every heartbeat (None: not now)."""
    last_tick: float | None = field(default=None, init=False)

    def listening(self, now: float) -> float:
        """Seconds this watcher has been listening at `now` (monotonic), restarting the count
        after a start, a database failure or a stall."""
        stalled = self.last_tick is not None and now - self.last_tick > self.every_seconds + STALL_SECONDS
        if self.listening_since is None or stalled:
            self.listening_since = now
        self.last_tick = now
        return now - self.listening_since

    async def tick(self) -> None:
        """One round: during the first lease of listening only check that the database answers;
        then mark lost nodes and expire graces.

        Raises:
            OSError, asyncpg.PostgresError: the database failed (the caller listens again).
        """
        if self.listening(time.monotonic()) < self.lease_seconds:
            await self.store.ping()
            return
        for node in await self.store.liveness.mark_lost(self.lease_seconds, self.grace_seconds):
            NODES_LOST.inc()
            log.warning(
                "node %s is lost: no heartbeat for %g s; its workers are UNAVAILABLE and its running actors "
                "UNREACHABLE for up to %g s",
                node, self.lease_seconds, self.grace_seconds,
            )  # fmt: skip
        for actor in await self.store.liveness.expire_unreachable():
            UNREACHABLE_EXPIRED.inc()
            log.warning("actor %s is CRASHED: its node did not answer within %g s", actor.key, self.grace_seconds)

    async def run(self) -> None:
        """Round after round until cancelled; a failed round is logged and listening starts over."""
        while True:
            try:
                await self.tick()
            except Exception:
                self.listening_since = None
                log.exception("node liveness check failed; listening again for a whole lease before marking nodes lost")
            await asyncio.sleep(self.every_seconds)
