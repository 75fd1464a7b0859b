"""The api-server's LISTEN on actor changes (api.actor_changes) and the resume's race between
the commit's NOTIFY and the workflow's result (api.routes.actors.first_of), on a real PostgreSQL
whose trigger sends the NOTIFY (store/migrations)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import pytest

from api.actor_changes import ActorChanges
from api.errors import Timeout
from api.routes.actors import first_of
from domain.refs import ActorRef
from store import Store
from tests.activities.test_store import ready_template, worker

HANG_GUARD_SECONDS = 20  # a test that would hang fails instead
pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def changes(database_url: str) -> AsyncIterator[ActorChanges]:
    watching = ActorChanges(database_url)
    watching.start()
    await asyncio.wait_for(watching.connected.wait(), HANG_GUARD_SECONDS)
    try:
        yield watching
    finally:
        await watching.stop()


async def notify(database_url: str, payload: str) -> None:
    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute("SELECT pg_notify('ate_actor_changes', $1)", payload)
    finally:
        await connection.close()


async def test_the_commit_of_the_state_waited_for_resolves_only_its_own_future(
    changes: ActorChanges, database_url: str
) -> None:
    with changes.expecting("demo/c1", "RUNNING") as running, changes.expecting("demo/c2", "RUNNING") as other:
        await notify(database_url, "demo/c1 RESUMING")  # another state of the same actor
        await notify(database_url, "demo/c2 RUNNING")  # the same state of another actor
        await asyncio.wait_for(other, HANG_GUARD_SECONDS)
        assert not running.done()
        await notify(database_url, "demo/c1 RUNNING")
        await asyncio.wait_for(running, HANG_GUARD_SECONDS)


async def test_a_resume_answers_at_the_commit_while_the_workflow_still_runs(
    changes: ActorChanges, database_url: str
) -> None:
    workflow_done = asyncio.Event()

    async def workflow_result() -> object:
        await asyncio.sleep(3600)  # the workflow's completion and its result's way back
        workflow_done.set()
        return None

    with changes.expecting("demo/c1", "RUNNING") as committed:
        answering = asyncio.create_task(first_of(workflow_result(), committed, confirm(True)))
        await asyncio.sleep(0.05)
        assert not answering.done()  # nothing committed yet: it waits
        await notify(database_url, "demo/c1 RUNNING")
        assert await asyncio.wait_for(answering, HANG_GUARD_SECONDS)  # answered by the commit
    assert not workflow_done.is_set()


async def test_a_notify_the_actor_read_back_does_not_confirm_waits_for_the_workflow(
    changes: ActorChanges, database_url: str
) -> None:
    # A late NOTIFY of an earlier RUNNING: the actor read back is not RUNNING, so the answer is
    # the workflow's (here its failure), not a RUNNING actor.
    async def workflow_result() -> object:
        await asyncio.sleep(0.2)
        raise Timeout("resume of actor demo/c1 did not finish within 1 s; it continues in the background")

    with changes.expecting("demo/c1", "RUNNING") as committed:
        answering = asyncio.create_task(first_of(workflow_result(), committed, confirm(False)))
        await notify(database_url, "demo/c1 RUNNING")
        with pytest.raises(Timeout, match="did not finish within 1 s"):
            await asyncio.wait_for(answering, HANG_GUARD_SECONDS)


def confirm(answer: bool) -> Callable[[], Awaitable[bool]]:
    """A `confirmed` for `first_of` whose read-back says `answer`."""

    async def confirmed() -> bool:
        return answer

    return confirmed


async def test_a_workflow_that_fails_before_the_commit_fails_the_request(changes: ActorChanges) -> None:
    async def workflow_result() -> object:
        raise Timeout("resume of actor demo/c1 did not finish within 1 s; it continues in the background")

    with changes.expecting("demo/c1", "RUNNING") as committed:
        with pytest.raises(Timeout, match="did not finish within 1 s"):
            await asyncio.wait_for(first_of(workflow_result(), committed, confirm(True)), HANG_GUARD_SECONDS)


async def test_without_the_listen_the_workflow_result_answers(database_url: str) -> None:
    silent = ActorChanges(database_url)  # never started: no LISTEN
    with silent.expecting("demo/c1", "RUNNING") as committed:
        answered_by_commit = await asyncio.wait_for(
            first_of(asyncio.sleep(0, "done"), committed, confirm(True)), HANG_GUARD_SECONDS
        )
        assert not answered_by_commit
        assert not committed.done()


async def test_a_real_state_change_is_notified_by_the_trigger(changes: ActorChanges, store: Store) -> None:
    # The trigger on `actors`, not a hand-made NOTIFY: a new actor is SUSPENDED at its commit.
    await store.nodes.register("n1", "127.0.0.1:1", "v", [worker("w1")])  # the golden boot's place
    await ready_template(store)
    with changes.expecting("demo/c1", "SUSPENDED") as created, changes.expecting("demo/c1", "RUNNING") as running:
        await store.actors.create(ActorRef("demo", "c1"), "counter", {})
        await asyncio.wait_for(created, HANG_GUARD_SECONDS)
        assert not running.done()


async def test_a_lost_listen_is_made_again(changes: ActorChanges, database_url: str) -> None:
    # The server ends the LISTEN's backend (a restart, a failover): the loop connects again and
    # the next commit's NOTIFY is heard.
    admin = await asyncpg.connect(database_url)
    try:
        ended = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND query ILIKE 'LISTEN%'"
        )
    finally:
        await admin.close()
    assert ended == 1
    for _ in range(int(HANG_GUARD_SECONDS / 0.01)):
        if not changes.connected.is_set():
            break
        await asyncio.sleep(0.01)
    await asyncio.wait_for(changes.connected.wait(), HANG_GUARD_SECONDS)
    with changes.expecting("demo/c1", "RUNNING") as running:
        await notify(database_url, "demo/c1 RUNNING")
        await asyncio.wait_for(running, HANG_GUARD_SECONDS)
