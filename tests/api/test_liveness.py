"""The api-server's liveness watcher on real Postgres (api/liveness.py): it marks a node lost only
after listening for a whole lease, so heartbeats it could not have heard (it was not running, the
database failed, it stood still) are never taken for a dead node.

Expected, from api/liveness.py's contract: a node silent longer than the lease is left alone
during the watcher's first lease of listening and marked lost (its workers UNAVAILABLE) after;
a tick later than planned by more than the interval + 1 s starts the count again.
"""

from __future__ import annotations

import asyncio

from api.liveness import LivenessWatcher
from store import Store
from tests.activities.test_store import worker


async def worker_states(store: Store) -> set[str]:
    return {w.state for w in await store.nodes.list_workers()}


async def test_a_stale_heartbeat_is_not_taken_for_a_lost_node_before_a_whole_lease_of_listening(store: Store) -> None:
    await store.nodes.register("n1", "127.0.0.1:1", "v", [worker("w0")])
    async with store.pool.acquire() as connection:  # as after an api-server restart: every heartbeat is stale
        await connection.execute("UPDATE nodes SET last_heartbeat = now() - interval '10 seconds'")
    watcher = LivenessWatcher(store, lease_seconds=0.5, grace_seconds=60, every_seconds=0.1)

    await watcher.tick()
    assert await worker_states(store) == {"ACTIVE"}  # just started: it could not have heard the beats
    await asyncio.sleep(0.6)
    await watcher.tick()
    assert await worker_states(store) == {"UNAVAILABLE"}  # a whole lease heard nothing: lost


async def test_a_heartbeat_within_the_first_lease_keeps_the_node(store: Store) -> None:
    await store.nodes.register("n1", "127.0.0.1:1", "v", [worker("w0")])
    async with store.pool.acquire() as connection:
        await connection.execute("UPDATE nodes SET last_heartbeat = now() - interval '10 seconds'")
    watcher = LivenessWatcher(store, lease_seconds=1.0, grace_seconds=60, every_seconds=0.1)
    await watcher.tick()
    await asyncio.sleep(0.6)
    await store.nodes.register("n1", "127.0.0.1:1", "v", [worker("w0")])  # the atelet's next beat lands
    await asyncio.sleep(0.5)
    await watcher.tick()  # listening for 1.1 s, the last beat 0.5 s old: alive
    assert await worker_states(store) == {"ACTIVE"}


def test_a_stall_or_a_failure_starts_the_listening_again(store: Store) -> None:
    watcher = LivenessWatcher(store, lease_seconds=4, grace_seconds=60, every_seconds=0.5)
    assert watcher.listening(100.0) == 0.0
    assert watcher.listening(100.5) == 0.5
    assert watcher.listening(101.75) == 1.75  # 1.25 s after the last tick: within interval + 1 s
    assert watcher.listening(103.5) == 0.0  # 1.75 s later: this process stood still, listen again
    assert watcher.listening(104.0) == 0.5
    watcher.listening_since = None  # what `run` does after a failed round
    assert watcher.listening(104.5) == 0.0
