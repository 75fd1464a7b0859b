"""`Store`: the only user of asyncpg. One connection pool shared by a few plain classes, one per
concern; named queries in (`queries.sql`), dataclasses and store errors out.

- the catalog: `atespaces`, `templates`, `actors`, `tags`, `history` (operations of an actor);
- access: `tokens` (the bearer tokens ate issues), `secrets` (sealed values, never shown);
- the router replicas: `router_drains` (their leases, and the drains of an actor before its checkpoint);
- the nodes: `nodes` (registration, heartbeats, reconciliation, crashes, fencing), `liveness`
  (lost nodes, UNREACHABLE actors and their grace, CRASHED actors to recover);
- the operations' transitions, one class per workflow: `resumes`, `suspends`, `pauses`,
  `uploads`, `golden_snapshots`, `reverts`, `drains`;
- what those share inside their transactions: `placement` (with its in-memory worker view,
  started by the first placement or by `Placement.view.ready()`), `snapshots`, `pinning`;
- the benchmarks' readings and staging (bench/ only): `measurements`.
"""

from __future__ import annotations

import json

import asyncpg

from domain.logs import DEFAULT_LOG_BYTES_PER_ACTOR
from store.actor_logs import ActorLogs
from store.actors import Actors
from store.atespaces import Atespaces
from store.drains import Drains
from store.execs import Execs
from store.forks import Forks
from store.freezes import Freezes
from store.golden_snapshots import GoldenSnapshots
from store.history import OperationHistory
from store.idleness import Idleness
from store.image_pulls import ImagePulls
from store.liveness import Liveness
from store.measurements import Measurements
from store.migrations import migrate
from store.nodes import Nodes
from store.pauses import Pauses
from store.pinning import Pinning
from store.placement import Placement
from store.pressure import Pressure
from store.resumes import Resumes
from store.reverts import Reverts
from store.room_queue import RoomQueue
from store.router_drains import RouterDrains
from store.secrets import Secrets
from store.snapshot_listing import SnapshotListing
from store.snapshots import Snapshots
from store.suspends import Suspends
from store.tags import Tags
from store.templates import Templates
from store.tokens import AccessTokens
from store.uploads import Uploads


async def _init_connection(connection: asyncpg.Connection) -> None:
    await connection.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


class Store:
    """Postgres access for the API and the activities.

    Args:
        pool: an asyncpg pool whose connections decode jsonb (see `Store.connect`).
    """

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.atespaces = Atespaces(pool)
        self.templates = Templates(pool, self.atespaces)
        self.actors = Actors(pool, self.templates)
        self.tags = Tags(pool)
        self.history = OperationHistory(pool)
        self.nodes = Nodes(pool)
        self.liveness = Liveness(pool)
        self.placement = Placement(pool)
        self.snapshots = Snapshots(pool)
        self.pinning = Pinning(self.nodes, self.placement, self.snapshots)
        self.resumes = Resumes(pool, self.placement, self.snapshots, self.pinning)
        self.suspends = Suspends(pool, self.placement, self.snapshots, self.pinning)
        self.pauses = Pauses(pool, self.placement, self.snapshots)
        self.uploads = Uploads(pool, self.nodes, self.snapshots)
        self.golden_snapshots = GoldenSnapshots(pool, self.placement, self.snapshots)
        self.reverts = Reverts(pool, self.placement, self.nodes)
        self.drains = Drains(pool, self.placement)
        self.tokens = AccessTokens(pool)
        self.secrets = Secrets(pool, self.atespaces)
        self.router_drains = RouterDrains(pool)
        self.freezes = Freezes(pool, self.placement)
        self.execs = Execs(pool, self.placement)
        self.idleness = Idleness(pool)
        self.room_queue = RoomQueue(pool)
        self.pressure = Pressure(pool, self.snapshots, self.room_queue)
        self.measurements = Measurements(pool)
        self.actor_logs = ActorLogs(pool, DEFAULT_LOG_BYTES_PER_ACTOR)
        self.image_pulls = ImagePulls(pool)
        self.snapshot_listing = SnapshotListing(pool)
        self.forks = Forks(pool)

    @classmethod
    async def connect(
        cls, dsn: str, *, min_size: int = 2, max_size: int = 10, command_timeout: float | None = None,
        connect_timeout: float = 60.0,
    ) -> Store:
        """Open a pool to `dsn` (a postgres:// URL).

        Args:
            command_timeout: seconds a statement may take (None: no bound); past it TimeoutError.
            connect_timeout: seconds a new connection may take; past it TimeoutError.

        Raises:
            OSError, asyncpg.PostgresError: the database cannot be reached.
        """
        pool = await asyncpg.create_pool(dsn, min_size=min_size, max_size=max_size, init=_init_connection,
                                         command_timeout=command_timeout, timeout=connect_timeout)
        assert pool is not None
        return cls(pool)

    async def migrate(self) -> tuple[int, int]:
        """Bring the schema up to date (`store.migrations.migrate`: under an advisory lock, so
        processes starting at once apply each migration once).

        Returns:
            (version before, version after).
        """
        async with self.pool.acquire() as connection:
            return await migrate(connection)

    async def close(self) -> None:
        """Stop the worker view (if placement started it) and close every connection."""
        await self.placement.view.close()
        await self.pool.close()

    async def ping(self) -> None:
        """Raise when the database does not answer."""
        await self.pool.fetchval("SELECT 1")
