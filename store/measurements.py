"""What the benchmarks (bench/) read and stage in a stack's database beside the REST API: the
snapshot an actor or a template would restore (to restore it by hand), table sizes, bulk actor
rows for the scale run, hollow nodes for the placement run, and timed runs of a query and its
candidate. No process of ate uses this; its queries are in `measurements.sql`, named and
described like the store's own, so that bench/ needs no database driver of its own.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import asyncpg

from store.sql import QUERIES, load_queries

M = load_queries(Path(__file__).with_name("measurements.sql"))
"""The benchmarks' named queries."""


class Measurements:
    """The benchmarks' reads and writes, on the store's pool (`Store.measurements`).

    Args:
        pool: the store's pool (its connections decode jsonb).
    """

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def latest_snapshot(self, atespace: str, name: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """An actor's latest snapshot and its template's spec.

        Returns:
            (snapshot URI, manifest, template spec as stored).

        Raises:
            LookupError: the actor or its latest snapshot does not exist.
        """
        row = await self.pool.fetchrow(M["latest_snapshot_of_actor"], atespace, name)
        if row is None:
            raise LookupError(f"actor {atespace}/{name} has no latest snapshot")
        return row["uri"], row["manifest"], row["spec"]

    async def golden_snapshot(self, atespace: str, template: str) -> tuple[str, dict[str, Any]]:
        """A template's golden snapshot and its spec.

        Returns:
            (snapshot URI, template spec as stored).

        Raises:
            LookupError: the template or its golden snapshot does not exist.
        """
        row = await self.pool.fetchrow(M["golden_snapshot_of_template"], atespace, template)
        if row is None:
            raise LookupError(f"template {atespace}/{template} has no golden snapshot")
        return row["uri"], row["spec"]

    async def table_sizes(self) -> dict[str, dict[str, float]]:
        """Per table that grows with actors: `{name: {rows, bytes, tuple_bytes}}` (bytes: heap,
        indexes and TOAST; tuple_bytes: the mean row's)."""
        rows = await self.pool.fetch(M["per_actor_table_sizes"])
        return {r["name"]: {"rows": r["rows"], "bytes": r["bytes"], "tuple_bytes": r["tuple_bytes"]} for r in rows}

    async def database_bytes(self) -> int:
        """The whole database's size in bytes."""
        return int(await self.pool.fetchval(M["database_size"]))

    async def actor_count(self) -> int:
        """How many actor rows there are."""
        return int(await self.pool.fetchval(M["count_actors"]))

    async def actors_table(self) -> tuple[int, int, int]:
        """The actors table: (rows, heap bytes, index bytes)."""
        row = await self.pool.fetchrow(M["actors_table_size"])
        assert row is not None
        return int(row["rows"]), int(row["heap"]), int(row["indexes"])

    async def insert_actors(self, atespace: str, template: str, start: int, end: int) -> int:
        """Insert actors `s<start>`..`s<end - 1>` (8-digit numbers) of `template`, never resumed,
        with the triggers off (no NOTIFY per row), then ANALYZE the table.

        Returns:
            How many actor rows there are now.
        """
        async with self.pool.acquire() as connection:
            await connection.execute("SET session_replication_role = replica")
            try:
                await connection.execute(M["insert_bulk_actors"], atespace, template, start, end)
                await connection.execute("ANALYZE actors")
                return int(await connection.fetchval(M["count_actors"]))
            finally:
                await connection.execute("RESET session_replication_role")

    async def delete_never_resumed_actors(self) -> None:
        """Drop the rows `insert_actors` made that were never resumed (triggers off)."""
        async with self.pool.acquire() as connection:
            await connection.execute("SET session_replication_role = replica")
            try:
                await connection.execute(M["delete_never_resumed_actors"])
            finally:
                await connection.execute("RESET session_replication_role")

    async def heartbeat_nodes(self, prefix: str) -> None:
        """Record a heartbeat of every node whose name starts with `prefix`."""
        await self.pool.execute(M["heartbeat_nodes_named"], prefix)

    async def delete_nodes(self, prefix: str) -> None:
        """Delete the nodes whose name starts with `prefix`, and their workers."""
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.execute(M["delete_workers_of_nodes_named"], prefix)
            await connection.execute(M["delete_nodes_named"], prefix)

    async def worker_counts(self) -> tuple[int, int]:
        """(workers, ACTIVE workers) as the table says."""
        row = await self.pool.fetchrow(M["count_workers"])
        assert row is not None
        return int(row["total"]), int(row["active"])

    async def time_list_actors(self, candidate: bool, *args: Any) -> tuple[float, int]:
        """Run the store's `list_actors` (or, with `candidate`, its candidate in measurements.sql)
        once with `args` (`list_actors`' parameters).

        Returns:
            (seconds, rows).
        """
        sql = M["list_actors_candidate"] if candidate else QUERIES["list_actors"]
        async with self.pool.acquire() as connection:
            started = time.monotonic()
            rows = await connection.fetch(sql, *args)
            return time.monotonic() - started, len(rows)

    async def explain_list_actors(self, *args: Any) -> list[str]:
        """The plan of the store's `list_actors` with `args`, run (EXPLAIN ANALYZE, BUFFERS).

        Returns:
            The plan's lines.
        """
        rows = await self.pool.fetch("EXPLAIN (ANALYZE, BUFFERS) " + QUERIES["list_actors"], *args)
        return [r[0] for r in rows]
