"""Lost nodes and the actors waiting for them (domain/liveness.py): a node silent past its lease
is lost (workers UNAVAILABLE, RUNNING actors UNREACHABLE for the grace), an UNREACHABLE actor
whose grace ran out is CRASHED, and CRASHED actors whose template says `onCrash: Revert` are
listed for automatic recovery. The api-server's liveness watcher calls these; every one is
idempotent, so several api-servers may call them at once.

A node coming back is the heartbeat's business (`Nodes.register` reconciles what it runs).
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from domain.liveness import NODE_LEASE_SECONDS, UNREACHABLE_GRACE_SECONDS
from domain.refs import ActorRef
from store.crashes import hold_for_drain
from store.sql import QUERIES as Q


@dataclass(frozen=True)
class Unreachability:
    """Why an UNREACHABLE actor waits: its node, seconds since the node's last heartbeat, and
    seconds of the grace left (negative once it ran out)."""

    node: str
    silent_seconds: float
    remaining_seconds: float


MAX_RECOVERIES_PER_WINDOW = 3
"""Automatic recoveries (onCrash: Revert) of one actor within RECOVERY_WINDOW_SECONDS before they stop."""
RECOVERY_WINDOW_SECONDS = 600.0


@dataclass(frozen=True)
class CrashedActor:
    """A CRASHED actor whose template asks for automatic recovery, and why it crashed."""

    actor: ActorRef
    last_error: str | None


class Liveness:
    """mark_lost, expire_unreachable, unreachable and crashed_to_recover."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def mark_lost(
        self, lease_seconds: float = NODE_LEASE_SECONDS, grace_seconds: float = UNREACHABLE_GRACE_SECONDS
    ) -> list[str]:
        """Nodes without a heartbeat for `lease_seconds` are lost: their workers UNAVAILABLE (out
        of placement), their RUNNING actors UNREACHABLE for `grace_seconds` (worker and place
        kept, a `NodeLost` record in each one's history).

        Returns:
            The nodes marked now, by name (a node already marked is not marked again).
        """
        lost: list[str] = []
        async with self.pool.acquire() as connection, connection.transaction():
            for node in await connection.fetch(Q["lost_nodes"], lease_seconds):
                name = node["name"]
                await connection.execute(Q["set_node_workers_state"], name, "UNAVAILABLE", "node lost")
                await connection.execute(Q["mark_node_lost"], name)
                reason = (
                    f"node {name} stopped answering (no heartbeat since {node['last_heartbeat']:%Y-%m-%d %H:%M:%S} "
                    f"UTC); the actor waits up to {grace_seconds:g} s for it to return"
                )
                await connection.fetch(Q["mark_node_actors_unreachable"], name, grace_seconds, reason)
                lost.append(name)
        return lost

    async def expire_unreachable(self, limit: int = 1000) -> list[ActorRef]:
        """UNREACHABLE actors whose grace ran out become CRASHED and free their place; their
        sandbox, should the node return, is terminated by that node's next heartbeat (nothing
        is placed there for it any more).

        Returns:
            The actors marked CRASHED now (at most `limit`; the rest at the next call).
        """
        crashed: list[ActorRef] = []
        async with self.pool.acquire() as connection, connection.transaction():
            for row in await connection.fetch(Q["expired_unreachable_actors"], limit):
                ref = ActorRef(row["atespace"], row["name"])
                if row["node"] is None:
                    why = "its worker is gone"
                else:
                    why = (
                        f"node {row['node']} did not answer within the grace (silent for "
                        f"{row['silent_seconds']:.0f} s since {row['last_heartbeat']:%Y-%m-%d %H:%M:%S} UTC)"
                    )
                reason = (
                    f"{why}: its sandbox is taken as lost and is terminated if the node returns; bring the actor "
                    f"back to its last completed snapshot with 'ate revert actor {ref.name} -a {ref.atespace}'"
                )
                version = await connection.fetchval(Q["crash_unreachable_actor"], ref.atespace, ref.name, reason)
                if version is None:
                    continue
                await connection.execute(Q["delete_placement"], ref.workflow_id)
                await hold_for_drain(connection, ref, row["worker_id"], version)
                crashed.append(ref)
        return crashed

    async def unreachable(self, ref: ActorRef) -> Unreachability | None:
        """Why `ref` is UNREACHABLE; None when it is not (any more)."""
        row = await self.pool.fetchrow(Q["actor_unreachable"], ref.atespace, ref.name)
        if row is None:
            return None
        return Unreachability(
            node=row["node"], silent_seconds=row["silent_seconds"], remaining_seconds=row["remaining_seconds"]
        )

    async def crashed_to_recover(
        self,
        limit: int = 100,
        window_seconds: float = RECOVERY_WINDOW_SECONDS,
        max_recoveries: int = MAX_RECOVERIES_PER_WINDOW,
    ) -> list[CrashedActor]:
        """CRASHED actors whose template says `onCrash: Revert`, the longest crashed first; not
        those automatically recovered `max_recoveries` times within the last `window_seconds`
        (a crash loop: see `stop_crash_loops`)."""
        rows = await self.pool.fetch(Q["crashed_actors_to_revert"], limit, window_seconds, max_recoveries)
        return [CrashedActor(ActorRef(r["atespace"], r["name"]), r["last_error"]) for r in rows]

    async def stop_crash_loops(
        self, window_seconds: float = RECOVERY_WINDOW_SECONDS, max_recoveries: int = MAX_RECOVERIES_PER_WINDOW
    ) -> list[ActorRef]:
        """CRASHED actors in a crash loop (recovered `max_recoveries` times within `window_seconds`)
        stay CRASHED: their last error says so once, with what to do (Kubernetes' CrashLoopBackOff,
        without the automatic retry: a snapshot that crashes every time is not retried forever).

        Returns:
            The actors given the notice now.
        """
        notice = crash_loop_notice(window_seconds, max_recoveries)
        rows = await self.pool.fetch(Q["stop_crash_loop_recoveries"], window_seconds, max_recoveries, notice)
        return [ActorRef(r["atespace"], r["name"]) for r in rows]


def crash_loop_notice(window_seconds: float, max_recoveries: int) -> str:
    """What a crash-looping actor's last error gains (appended to the crash's reason)."""
    return (
        f"; automatic recovery stopped: {max_recoveries} reverts (onCrash: Revert) within {window_seconds:g} s did "
        "not keep it running; find the cause with 'ate describe actor', then revert it with 'ate revert actor'"
    )
