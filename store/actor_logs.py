"""Actors' output (`ate logs`, domain/logs.py): the lines atelets ship, kept per actor up to a
bound of bytes, and the lifecycle events read back with them from the actor's history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from domain.logs import OUTPUT_STREAM, LifecycleEvent
from domain.refs import ActorRef
from store.sql import QUERIES as Q


@dataclass(frozen=True)
class ShippedLine:
    """One line as a node ships it: when it was read, its byte offset in the node's log file."""

    time: datetime
    offset: int
    line: str


@dataclass(frozen=True)
class LogLine:
    """One stored line of an actor's output; `seq` orders an actor's lines (and resumes a follow)."""

    seq: int
    time: datetime
    stream: str
    node: str
    worker: str
    line: str


@dataclass(frozen=True)
class LogEvent:
    """A finished operation of the actor, at the time it finished."""

    operation_id: str
    time: datetime
    event: LifecycleEvent


class ActorLogs:
    """append (from a node), lines and events (for a reader)."""

    def __init__(self, pool: asyncpg.Pool, bytes_per_actor: int) -> None:
        """`bytes_per_actor`: how much of each actor's newest output is kept (bytes of line text)."""
        self.pool = pool
        self.bytes_per_actor = bytes_per_actor

    async def append(self, node: str, worker: str, ref: ActorRef, log_id: str, lines: list[ShippedLine]) -> bool:
        """Adds `lines` of node `node`'s log file `log_id` to the actor's output, skipping those
        already stored, then drops its oldest lines beyond `bytes_per_actor` bytes.

        Returns:
            False (nothing stored) when the actor is unknown, or neither placed on one of the
            node's workers nor the node its newest stored line came from (a node ships the last
            lines of an actor that just left it): a node may write only its own actors' output.
        """
        async with self.pool.acquire() as connection, connection.transaction():
            if not await connection.fetchval(Q["log_source_allowed"], ref.atespace, ref.name, node):
                return False
            await connection.execute(Q["lock_actor_log"], ref.atespace, ref.name)
            await connection.execute(
                Q["insert_log_lines"], ref.atespace, ref.name, OUTPUT_STREAM, node, worker, log_id,
                [line.time for line in lines], [line.offset for line in lines], [line.line for line in lines],
            )  # fmt: skip
            await connection.execute(Q["trim_log_lines"], ref.atespace, ref.name, self.bytes_per_actor)
        return True

    async def lines(self, ref: ActorRef, *, after_seq: int = 0, since: datetime | None = None,
                    limit: int) -> list[LogLine]:  # fmt: skip
        """The actor's newest `limit` lines after `after_seq`, at or after `since`, oldest first."""
        rows = await self.pool.fetch(Q["log_lines"], ref.atespace, ref.name, after_seq, since, limit)
        return [LogLine(**dict(row)) for row in rows]

    async def events(self, ref: ActorRef, since: datetime) -> list[LogEvent]:
        """The actor's operations that finished at or after `since`, the newest 1000, oldest first."""
        rows = await self.pool.fetch(Q["log_events"], ref.atespace, ref.name, since)
        return [
            LogEvent(row["operation_id"], row["finished_at"],
                     LifecycleEvent(row["operation"], row["outcome"], row["worker"], row["reason"], row["error"]))
            for row in rows
        ]  # fmt: skip

    async def has_run(self, ref: ActorRef) -> bool:
        """Whether the actor ever resumed successfully or printed a line (so has output to show)."""
        return bool(await self.pool.fetchval(Q["actor_has_run"], ref.atespace, ref.name))
