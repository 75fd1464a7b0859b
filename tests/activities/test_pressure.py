"""Which actors a pressure suspend may move (store/pressure.py), on a real PostgreSQL.

Expected from issue 27: only actors whose template opted in (`suspendUnderPressure`), RUNNING or
FROZEN with no operation in flight, that ran at least `minimumRunSeconds`, on a worker that would
take the resuming actor; frozen ones first, then the longest idle; Suspend unless the template
says Pause. The stage has node n1 with two one-place workers, w0 and w1.
"""

from __future__ import annotations

from domain.idle import IdleAction
from domain.refs import ActorRef
from domain.templates import ActorTemplateSpec
from store import Store
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
