"""Which actors a pressure suspend may move (store/pressure.py), on a real PostgreSQL.

Expected from issue 27: only actors whose template opted in (`suspendUnderPressure`), RUNNING or
FROZEN with no operation in flight, that ran at least `minimumRunSeconds`, on a worker that would
take the resuming actor; frozen ones first, then the longest idle; Suspend unless the template
says Pause. The stage has node n1 with two one-place workers, w0 and w1.
"""

from __future__ import annotations

import asyncio

import pytest

from domain.idle import IdleAction
from domain.refs import ActorRef
from domain.templates import ActorTemplateSpec
from store import Store, room_queue
from store.errors import NoCapacity
from tests.activities.test_store import SPEC


async def opted_in(store: Store, name: str, pressure: object) -> None:
    await store.templates.create("demo", name, ActorTemplateSpec.from_document({**SPEC, "suspendUnderPressure": pressure}))
    plan = await store.golden_snapshots.begin("demo", name, f"golden-{name}")
    await store.golden_snapshots.complete("demo", name, plan.snapshot.snapshot_id, {"files": []}, 10)


async def running_of(store: Store, name: str, template: str, idle_seconds: int, running_seconds: int = 3600) -> ActorRef:
    ref = ActorRef("demo", name)
    await store.actors.create(ref, template, {})
    await store.resumes.begin(ref, f"r-{name}")
    await store.resumes.finish(ref, f"r-{name}")
    await store.pool.execute(
        "UPDATE actors SET last_active_at = now() - make_interval(secs => $3), "
        "running_since = now() - make_interval(secs => $4) WHERE atespace = $1 AND name = $2",
        ref.atespace, ref.name, idle_seconds, running_seconds,
    )  # fmt: skip
    return ref


async def waiting(store: Store) -> ActorRef:
    ref = ActorRef("demo", "newcomer")
    await store.actors.create(ref, "counter", {})
    return ref


async def test_the_longest_idle_opted_in_actor_is_chosen_first(stage: Store) -> None:
    await opted_in(stage, "lazy", True)
    recent = await running_of(stage, "recent", "lazy", idle_seconds=5)
    old = await running_of(stage, "old", "lazy", idle_seconds=500)
    found = await stage.pressure.victims(await waiting(stage))
    assert [(v.actor, v.action, v.pool) for v in found] == [
        (old, IdleAction.SUSPEND, "default"),
        (recent, IdleAction.SUSPEND, "default"),
    ]


async def test_a_frozen_actor_goes_before_any_running_one(stage: Store) -> None:
    await opted_in(stage, "lazy", {"action": "Pause"})
    idle = await running_of(stage, "idle", "lazy", idle_seconds=900)
    frozen = await running_of(stage, "frozen", "lazy", idle_seconds=10)
    await stage.freezes.begin(frozen, "f1")
    await stage.freezes.finish(frozen, "f1")
    found = await stage.pressure.victims(await waiting(stage))
    assert [(v.actor, v.action) for v in found] == [(frozen, IdleAction.PAUSE), (idle, IdleAction.PAUSE)]


async def test_not_opted_in_busy_or_too_young_actors_are_never_chosen(stage: Store) -> None:
    await opted_in(stage, "young", {"minimumRunSeconds": 600})
    await running_of(stage, "plain", "counter", idle_seconds=900)  # its template did not opt in
    await running_of(stage, "fresh", "young", idle_seconds=900, running_seconds=60)  # ran 60 s < 600 s
    assert await stage.pressure.victims(await waiting(stage)) == []


async def test_an_actor_with_an_operation_in_flight_is_not_chosen(stage: Store) -> None:
    await opted_in(stage, "lazy", True)
    busy = await running_of(stage, "busy", "lazy", idle_seconds=900)
    other = await running_of(stage, "other", "lazy", idle_seconds=10)
    await stage.suspends.begin(busy, "s-busy")  # SUSPENDING under its own operation
    assert [v.actor for v in await stage.pressure.victims(await waiting(stage))] == [other]


async def test_a_worker_that_could_not_take_the_newcomer_is_not_emptied_for_it(stage: Store) -> None:
    # A newcomer that selects a label no worker has: moving anyone would not help it.
    await opted_in(stage, "lazy", True)
    await running_of(stage, "idle", "lazy", idle_seconds=900)
    picky = ActorRef("demo", "picky")
    await stage.actors.create(picky, "counter", {"zone": "far"})
    assert await stage.pressure.victims(picky) == []
    assert [v.actor.name for v in await stage.pressure.victims(await waiting(stage))] == ["idle"]


# -- the worker a move empties is kept for the resume that chose the move ----------------------
# Expected from the bench's finding (bench/README.md, "oversubscription"): two resumes short of room
# must not move the same actor, and the worker one of them emptied is not taken by the other.


async def suspended(store: Store, ref: ActorRef) -> None:
    """Suspend `ref` as a SuspendActor would (its place freed at the commit)."""
    plan = await store.suspends.begin(ref, f"s-{ref.name}")
    await store.suspends.complete(ref, f"s-{ref.name}", plan.snapshot.snapshot_id, {"files": []}, 5)


async def test_two_resumes_short_of_room_each_claim_a_different_actor(stage: Store) -> None:
    await opted_in(stage, "lazy", True)
    old = await running_of(stage, "old", "lazy", idle_seconds=500)
    recent = await running_of(stage, "recent", "lazy", idle_seconds=5)
    first, second = await waiting(stage), ActorRef("demo", "second")
    await stage.actors.create(second, "counter", {})
    assert (await stage.pressure.claim(first, [])).victims[0].actor == old  # the longest idle
    assert (await stage.pressure.claim(second, [])).victims[0].actor == recent  # not the one `first` is moving
    assert [v.actor for v in await stage.pressure.victims(first)] == [old]  # its own stays offered to it
    assert (await stage.pressure.claim(ActorRef("demo", "second"), [recent])).victims == []  # nothing else to move


async def full_with_a_rival(stage: Store) -> tuple[ActorRef, ActorRef, ActorRef]:
    """Both workers taken by opted-in actors (`victim` the longest idle), a resume short of room
    (`newcomer`) and another actor that will want room (`rival`)."""
    await opted_in(stage, "lazy", True)
    victim = await running_of(stage, "victim", "lazy", idle_seconds=500)
    await running_of(stage, "other", "lazy", idle_seconds=5)  # fills the second worker
    newcomer, rival = await waiting(stage), ActorRef("demo", "rival")
    await stage.actors.create(rival, "counter", {})
    return victim, newcomer, rival


async def test_the_worker_a_move_emptied_goes_to_the_resume_that_made_it(stage: Store) -> None:
    victim, newcomer, rival = await full_with_a_rival(stage)
    assert (await stage.pressure.claim(newcomer, [])).victims[0].actor == victim
    kept = (await stage.actors.get(victim)).worker.worker_id
    await suspended(stage, victim)  # the worker is empty now
    with pytest.raises(NoCapacity):  # the rival placed first: it does not get the newcomer's worker
        await stage.resumes.begin(rival, "r-rival")
    plan = await stage.resumes.begin(newcomer, "r-newcomer")
    assert plan.worker.worker_id == kept
    assert await stage.pool.fetchval("SELECT count(*) FROM workers WHERE reserved_for IS NOT NULL") == 0


async def test_a_reservation_nobody_uses_runs_out(stage: Store) -> None:
    victim, newcomer, rival = await full_with_a_rival(stage)
    assert (await stage.pressure.claim(newcomer, [], seconds=1.0)).victims[0].actor == victim
    kept = (await stage.actors.get(victim)).worker.worker_id
    await suspended(stage, victim)
    with pytest.raises(NoCapacity):
        await stage.resumes.begin(rival, "r-rival")
    await asyncio.sleep(1.5)  # the newcomer never came back for it
    plan = await stage.resumes.begin(rival, "r-rival-2")
    assert plan.worker.worker_id == kept


# -- the room queue: resumes short of room are served in the order they came -------------------


async def test_a_move_empties_its_worker_for_the_oldest_waiter_and_a_bind_leaves_the_queue(stage: Store) -> None:
    await opted_in(stage, "lazy", True)
    v1 = await running_of(stage, "v1", "lazy", idle_seconds=500)
    v2 = await running_of(stage, "v2", "lazy", idle_seconds=100)
    old, young = await waiting(stage), ActorRef("demo", "young")
    await stage.actors.create(young, "counter", {})
    # The old resume joined the queue first and is being moved for (v1's worker is kept for it).
    first = await stage.pressure.claim(old, [], operation_id="run-old")
    assert (first.victims[0].actor, first.room_for) == (v1, None)
    # The young one now: the old one has its worker kept, so v2's worker is the young one's.
    second = await stage.pressure.claim(young, [], operation_id="run-young")
    assert (second.victims[0].actor, second.room_for) == (v2, None)
    assert await stage.room_queue.waiting_by_pool() == {"default": 2}
    # v1's move gave way (it stays on its worker): the old one's reservation is nobody's again...
    await stage.room_queue.release([v1])
    # ...and a third, younger resume asking now moves v1 for the old one, which came first.
    third = ActorRef("demo", "third")
    await stage.actors.create(third, "counter", {})
    for_old = await stage.pressure.claim(third, [], operation_id="run-third")
    assert (for_old.victims[0].actor, for_old.room_for, for_old.room_for_operation) == (v1, newcomer_ref(), "run-old")
    kept = (await stage.actors.get(v1)).worker.worker_id
    await suspended(stage, v1)
    with pytest.raises(NoCapacity):  # the third resume places: v1's worker is the old one's
        await stage.resumes.begin(third, "r-third", waited_for_room=True)
    plan = await stage.resumes.begin(old, "r-old", waited_for_room=True)
    assert plan.worker.worker_id == kept
    assert await stage.room_queue.waiting_by_pool() == {"default": 2}  # young and third wait on
    await stage.room_queue.leave(young)
    await stage.room_queue.leave(third)
    assert await stage.room_queue.waiting_by_pool() == {}
    assert await stage.pool.fetchval("SELECT count(*) FROM workers WHERE reserved_for IS NOT NULL") == 0


def newcomer_ref() -> ActorRef:
    """The actor `waiting` creates."""
    return ActorRef("demo", "newcomer")


async def test_a_waiter_that_stopped_trying_loses_its_place(stage: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(room_queue, "WAITER_LIVE_SECONDS", 0.5)
    await opted_in(stage, "lazy", True)
    victim = await running_of(stage, "victim", "lazy", idle_seconds=500)
    gone, here = await waiting(stage), ActorRef("demo", "here")
    await stage.actors.create(here, "counter", {})
    async with stage.pool.acquire() as connection:  # `gone` found no room and joined, then its caller left
        demand = (await stage.pressure._candidates(connection, gone))[0]
        await stage.room_queue.join(connection, gone.workflow_id, "run-gone", demand)
    await asyncio.sleep(0.8)
    claimed = await stage.pressure.claim(here, [], operation_id="run-here")
    assert (claimed.victims[0].actor, claimed.room_for) == (victim, None)  # not kept for `gone`
    assert await stage.room_queue.waiting_by_pool() == {"default": 1}
