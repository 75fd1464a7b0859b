"""Snapshot retention and going back (issue 30, "Keep and go back") on real Postgres.

Expected values come from the issue's rules, worked out by hand: a template keeps the last K
COMPLETED generations of each actor (`snapshotConfig.retainGenerations`, default 2); older ones
that nothing else keeps (a tag, another actor starting from them) are the collector's; a revert
may go back to any kept COMPLETED generation of the actor's own, and a generation that is not
kept is refused naming the field and the kept ones, with nothing changed.
"""

from __future__ import annotations

import pytest

from domain.refs import ActorRef
from domain.templates import RETAIN_GENERATIONS_DEFAULT, ActorTemplateSpec
from store import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, Store
from tests.activities.test_store import SPEC, ready_template, worker


@pytest.fixture
async def stage(store: Store) -> Store:
    """Node n1 with two workers; templates demo/counter (default retention), demo/keep3 (3) and demo/keep1 (1)."""
    await store.nodes.register("n1", "127.0.0.1:1", "v", [worker("w0"), worker("w1")])
    await ready_template(store)
    for name, k in (("keep3", 3), ("keep1", 1)):
        spec = {**SPEC, "snapshotConfig": {**SPEC["snapshotConfig"], "retainGenerations": k}}  # type: ignore[dict-item]
        await store.templates.create("demo", name, ActorTemplateSpec.from_document(spec))
        plan = await store.golden_snapshots.begin("demo", name, f"golden-{name}")
        await store.golden_snapshots.complete("demo", name, plan.snapshot.snapshot_id, {"files": []}, 10)
    return store


async def cycles(store: Store, ref: ActorRef, template: str, count: int) -> list[int]:
    """Create the actor from `template`, then `count` resume+suspend cycles; the snapshot IDs of
    generations 1..count."""
    await store.actors.create(ref, template, {})
    ids = []
    for n in range(1, count + 1):
        await store.resumes.begin(ref, f"r{n}")
        await store.resumes.finish(ref, f"r{n}")
        plan = await store.suspends.begin(ref, f"s{n}")
        assert plan.snapshot is not None and plan.snapshot.generation == n
        await store.suspends.complete(ref, f"s{n}", plan.snapshot.snapshot_id, {"files": []}, 1)
        ids.append(plan.snapshot.snapshot_id)
    return ids


async def garbage_of(store: Store, ids: list[int]) -> set[int]:
    """Which of `ids` the collector takes now (and claims)."""
    return {g.snapshot_id for g in await store.snapshots.garbage(100, 0)} & set(ids)


def test_the_default_keeps_two_generations() -> None:
    assert RETAIN_GENERATIONS_DEFAULT == 2
    assert ActorTemplateSpec.from_document(dict(SPEC)).snapshot_config.retain_generations == 2


@pytest.mark.parametrize(("template", "kept"), [("keep3", {3, 4, 5}), ("counter", {4, 5}), ("keep1", {5})])
async def test_the_collector_keeps_the_last_k_generations(stage: Store, template: str, kept: set[int]) -> None:
    ref = ActorRef("demo", "a1")
    ids = await cycles(stage, ref, template, 5)
    assert await garbage_of(stage, ids) == {ids[g - 1] for g in range(1, 6) if g not in kept}
    assert await stage.snapshot_listing.kept(ref) == sorted(kept)  # claimed ones are no longer kept
    listed = {s.generation: s.kept_by for s in await stage.snapshot_listing.of_atespace("demo", "a1")}
    assert listed == {g: ["latest"] if g == 5 else ["retained"] for g in kept}


async def test_a_tag_or_a_fork_keeps_a_generation_past_the_retention(stage: Store) -> None:
    ref = ActorRef("demo", "a1")
    await stage.actors.create(ref, "keep1", {})
    await stage.resumes.begin(ref, "r1")
    await stage.resumes.finish(ref, "r1")
    plan = await stage.suspends.begin(ref, "s1")
    assert plan.snapshot is not None
    await stage.suspends.complete(ref, "s1", plan.snapshot.snapshot_id, {"files": []}, 1)
    tag = await stage.tags.create(ref, "good")
    borrower = ActorRef("demo", "b1")
    await stage.actors.create(borrower, "keep1", {})
    await stage.tags.start_from(borrower, tag)
    ids = [plan.snapshot.snapshot_id]
    for n in (2, 3):
        await stage.resumes.begin(ref, f"r{n}")
        await stage.resumes.finish(ref, f"r{n}")
        again = await stage.suspends.begin(ref, f"s{n}")
        assert again.snapshot is not None
        await stage.suspends.complete(ref, f"s{n}", again.snapshot.snapshot_id, {"files": []}, 1)
        ids.append(again.snapshot.snapshot_id)
    # K=1: generation 2 goes; generation 1 stays, tagged, and b1 starts from it
    assert await garbage_of(stage, ids) == {ids[1]}
    listed = {s.generation: s.kept_by for s in await stage.snapshot_listing.of_atespace("demo", "a1")}
    assert listed == {1: ["fork b1", "tag good"], 3: ["latest"]}


async def test_revert_goes_back_to_a_kept_generation_even_from_suspended(stage: Store) -> None:
    ref = ActorRef("demo", "a1")
    ids = await cycles(stage, ref, "keep3", 4)
    await stage.snapshots.garbage(100, 0)  # generation 1 is claimed; 2, 3, 4 kept
    plan = await stage.reverts.begin(ref, "v1", to_generation=2)
    assert plan.from_state == "SUSPENDED" and plan.worker is None
    await stage.reverts.finish(ref, "v1", "reverted from SUSPENDED")
    actor = await stage.actors.get(ref)
    assert actor.state == "SUSPENDED" and actor.latest_snapshot is not None
    assert (actor.latest_snapshot.snapshot_id, actor.latest_snapshot.generation) == (ids[1], 2)
    resume = await stage.resumes.begin(ref, "r5")
    assert resume.snapshot is not None and resume.snapshot.snapshot_id == ids[1]  # what the restore gets
    await stage.resumes.finish(ref, "r5")
    suspended = await stage.suspends.begin(ref, "s5")
    assert suspended.snapshot is not None and suspended.snapshot.generation == 5  # numbers only grow
    await stage.suspends.complete(ref, "s5", suspended.snapshot.snapshot_id, {"files": []}, 1)
    # the last three by number stay (3, 4, 5); 2, the one reverted to, is superseded (and 1,
    # claimed before, comes back until its deletion is done)
    assert await garbage_of(stage, ids) == {ids[0], ids[1]}
    assert await stage.snapshot_listing.kept(ref) == [3, 4, 5]
    # a later generation than the latest can be gone back to as well
    await stage.reverts.begin(ref, "v2", to_generation=4)
    await stage.reverts.finish(ref, "v2", "reverted")
    latest = (await stage.actors.get(ref)).latest_snapshot
    assert latest is not None and latest.generation == 4


@pytest.mark.parametrize("generation", [1, 7])  # 1: collected; 7: never taken
async def test_a_generation_that_is_not_kept_is_refused_and_nothing_changes(stage: Store, generation: int) -> None:
    ref = ActorRef("demo", "a1")
    await cycles(stage, ref, "counter", 3)
    await stage.snapshots.garbage(100, 0)  # K=2: generation 1 claimed
    before = await stage.actors.get(ref)
    with pytest.raises(InvalidArgument) as refused:
        await stage.reverts.begin(ref, "v1", to_generation=generation)
    assert refused.value.message.startswith(
        f"to_generation: actor demo/a1 has no kept completed generation {generation}; kept: 2, 3."
    ), refused.value.message
    assert refused.value.details == {"field": "to_generation", "kept_generations": [2, 3]}
    with pytest.raises(InvalidArgument):
        await stage.snapshot_listing.check_kept(ref, generation)
    after = await stage.actors.get(ref)
    assert (after.state, after.version, after.latest_snapshot) == (before.state, before.version, before.latest_snapshot)
    assert [o.operation for o in await stage.history.of_actor(ref)].count("RevertActor") == 0


async def test_an_actor_never_suspended_has_no_generation_to_go_back_to(stage: Store) -> None:
    ref = ActorRef("demo", "new")
    await stage.actors.create(ref, "counter", {})
    with pytest.raises(InvalidArgument, match=r"kept: none yet \(it has never been suspended\)"):
        await stage.reverts.begin(ref, "v1", to_generation=1)
    with pytest.raises(FailedPrecondition, match=r"not in a revertable state \(state: SUSPENDED\)"):
        await stage.reverts.begin(ref, "v1")  # without a generation, SUSPENDED stays refused


async def test_a_fork_starts_from_the_sources_snapshot_and_keeps_it_alone(stage: Store) -> None:
    source = ActorRef("demo", "src")
    ids = await cycles(stage, source, "keep1", 1)
    forked = await stage.forks.create(source, ["f-1", "f-2", "f-3"])
    assert [(a.name, a.state, a.template) for a in forked] == [(n, "SUSPENDED", "keep1") for n in ("f-1", "f-2", "f-3")]
    assert {a.latest_snapshot.snapshot_id for a in forked if a.latest_snapshot} == {ids[0]}
    # the source moves on; K=1 would collect its generation 1, but the forks rest on it
    await stage.resumes.begin(source, "r2")
    await stage.resumes.finish(source, "r2")
    plan = await stage.suspends.begin(source, "s2")
    assert plan.snapshot is not None
    await stage.suspends.complete(source, "s2", plan.snapshot.snapshot_id, {"files": []}, 1)
    assert await garbage_of(stage, ids) == set()
    listed = {s.generation: s.kept_by for s in await stage.snapshot_listing.of_atespace("demo", "src")}
    assert listed == {1: ["fork f-1", "fork f-2", "fork f-3"], 2: ["latest"]}
    # a fork's first resume restores the source's snapshot; its first suspend is its own generation 1
    resumed = await stage.resumes.begin(ActorRef("demo", "f-1"), "fr1")
    assert resumed.snapshot is not None and resumed.snapshot.snapshot_id == ids[0]
    await stage.resumes.finish(ActorRef("demo", "f-1"), "fr1")
    own = await stage.suspends.begin(ActorRef("demo", "f-1"), "fs1")
    assert own.snapshot is not None and own.snapshot.generation == 1 and "/actors/f-1/" in own.snapshot.uri
    await stage.suspends.complete(ActorRef("demo", "f-1"), "fs1", own.snapshot.snapshot_id, {"files": []}, 1)
    for name in ("f-2", "f-3"):
        await stage.actors.delete(ActorRef("demo", name))
    assert await garbage_of(stage, ids) == {ids[0]}  # nothing rests on it any more
    await stage.actors.update_selector(source, {"zone": "a"})  # a fork has its source's selector
    [like] = await stage.forks.create(source, ["like"])
    assert like.worker_selector == {"zone": "a"}


async def test_a_fork_from_a_kept_generation(stage: Store) -> None:
    source = ActorRef("demo", "src")
    ids = await cycles(stage, source, "keep3", 3)
    [fork] = await stage.forks.create(source, ["old"], generation=1)
    assert fork.latest_snapshot is not None and fork.latest_snapshot.snapshot_id == ids[0]


async def test_a_fork_that_cannot_be_made_changes_nothing(stage: Store) -> None:
    source = ActorRef("demo", "src")
    with pytest.raises(NotFound, match="actor demo/src not found"):
        await stage.forks.create(source, ["f"])
    await stage.actors.create(source, "counter", {})
    with pytest.raises(FailedPrecondition, match="no completed snapshot to fork yet; suspend it first"):
        await stage.forks.create(source, ["f"])
    await stage.actors.delete(source)
    await cycles(stage, source, "counter", 3)
    await stage.snapshots.garbage(100, 0)  # K=2: generation 1 claimed
    with pytest.raises(InvalidArgument, match=r"^generation: actor demo/src has no kept completed generation 1; kept: 2, 3"):
        await stage.forks.create(source, ["f"], generation=1)
    await stage.actors.create(ActorRef("demo", "f-2"), "counter", {})
    with pytest.raises(AlreadyExists, match="actor demo/f-2 already exists; no actor was forked"):
        await stage.forks.create(source, ["f-1", "f-2", "f-3"])
    names = {a.name for a in (await stage.actors.page("demo", None, 100))[0]}
    assert names == {"src", "f-2"}
