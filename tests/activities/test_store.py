"""The store's transitions and placement on a real PostgreSQL database.

Expected values are worked out by hand from ARCHITECTURE.md (states, placement checks) and the
fixture's numbers: two workers with one place, 2 CPUs and 2 GiB each; a template that asks for
500m and 256Mi.
"""

from __future__ import annotations

import pytest

from domain.refs import ActorRef
from domain.states import SnapshotScope
from domain.templates import ActorTemplateSpec
from store import AlreadyExists, FailedPrecondition, NoCapacity, NoMatchingWorker, NotFound, Store
from store.records import WorkerRegistration

SPEC = {
    "sandboxClass": "gvisor",
    "containers": [{"name": "c", "image": "oci:x:latest"}],
    "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}},
    "snapshotConfig": {"onPause": "Full", "onCommit": "Full", "storageLocation": "file:///snap"},
}
GIB = 2**30


def worker(name: str, labels: dict[str, str] | None = None, places: int = 1) -> WorkerRegistration:
    return WorkerRegistration(
        name=name,
        pool="default",
        ip=f"10.0.0.{name[-1]}",
        sandbox_class="gvisor",
        labels=labels or {},
        places=places,
        cpu_millis=2000,
        memory_bytes=2 * GIB,
    )


async def ready_template(store: Store, spec: dict[str, object] = SPEC) -> None:
    """Atespace demo, template counter Ready with a golden snapshot (via the golden transitions)."""
    await store.atespaces.create("demo")
    await store.templates.create("demo", "counter", ActorTemplateSpec.from_document(dict(spec)))
    plan = await store.golden_snapshots.begin("demo", "counter", "golden-op")
    assert plan.snapshot.scope == SnapshotScope.FULL
    await store.golden_snapshots.complete("demo", "counter", plan.snapshot.snapshot_id, {"files": []}, 10)


async def test_atespace_and_template_lifecycle(store: Store) -> None:
    await store.atespaces.create("demo")
    with pytest.raises(AlreadyExists, match="atespace demo already exists"):
        await store.atespaces.create("demo")
    with pytest.raises(NotFound, match="atespace nope not found"):
        await store.templates.create("nope", "t", ActorTemplateSpec.from_document(SPEC))
    await store.templates.create("demo", "counter", ActorTemplateSpec.from_document(SPEC))
    with pytest.raises(NotFound, match="actor template demo/other not found"):
        await store.actors.create(ActorRef("demo", "a1"), "other", {})
    await store.actors.create(ActorRef("demo", "a1"), "counter", {})
    with pytest.raises(FailedPrecondition, match="not empty: it still holds 1 actor and 1 template"):
        await store.atespaces.delete("demo")
    with pytest.raises(FailedPrecondition, match="used by actors"):
        await store.templates.delete("demo", "counter")
    await store.actors.delete(ActorRef("demo", "a1"))
    await store.templates.delete("demo", "counter")
    await store.atespaces.delete("demo")
    assert await store.atespaces.all() == []


async def test_creating_a_template_again_says_what_to_do_when_it_failed(store: Store) -> None:
    await store.atespaces.create("demo")
    spec = ActorTemplateSpec.from_document(SPEC)
    await store.templates.create("demo", "counter", spec)
    with pytest.raises(AlreadyExists) as pending:
        await store.templates.create("demo", "counter", spec)
    assert pending.value.message == "actor template demo/counter already exists (templates are immutable)"
    await store.templates.set_phase("demo", "counter", "Failed", "the atelet did not answer the Run call", None)
    with pytest.raises(AlreadyExists) as failed:
        await store.templates.create("demo", "counter", spec)
    assert failed.value.message == (
        "actor template demo/counter already exists (templates are immutable); it is Failed (the atelet did not "
        "answer the Run call): delete it with 'ate delete template counter -a demo' and create it again"
    )


async def test_golden_boot_holds_a_place_until_completed(store: Store) -> None:
    await store.nodes.register("n1", "127.0.0.1:1", "v", [worker("w0")])
    await store.atespaces.create("demo")
    await store.templates.create("demo", "counter", ActorTemplateSpec.from_document(SPEC))
    plan = await store.golden_snapshots.begin("demo", "counter", "op-g")
    again = await store.golden_snapshots.begin("demo", "counter", "op-g")
    assert (again.worker.worker_id, again.snapshot.snapshot_id) == (plan.worker.worker_id, plan.snapshot.snapshot_id)
    assert plan.snapshot.uri.startswith("file:///snap/demo/templates/counter/1-")
    [w] = await store.nodes.list_workers()
    assert w.holders == ["template/demo/counter"]
    await store.golden_snapshots.complete("demo", "counter", plan.snapshot.snapshot_id, {"files": []}, 10)
    template = await store.templates.get("demo", "counter")
    assert (template.phase, template.golden_snapshot_id) == ("Ready", plan.snapshot.snapshot_id)
    [w] = await store.nodes.list_workers()
    assert w.holders == []


async def test_resume_places_binds_and_refuses_when_full(store: Store) -> None:
    await store.nodes.register("n1", "127.0.0.1:1", "v", [worker("w0"), worker("w1")])
    await ready_template(store)
    a1, a2, a3 = ActorRef("demo", "a1"), ActorRef("demo", "a2"), ActorRef("demo", "a3")
    for ref in (a1, a2, a3):
        await store.actors.create(ref, "counter", {})

    plan1 = await store.resumes.begin(a1, "op1")
    assert not plan1.already_running and plan1.snapshot is not None
    assert plan1.snapshot.uri.startswith("file:///snap/demo/templates/counter/1-")  # first resume: golden
    repeat = await store.resumes.begin(a1, "op1")  # a retried activity finds its own binding
    assert repeat.worker is not None and repeat.worker.worker_id == plan1.worker.worker_id

    plan2 = await store.resumes.begin(a2, "op2")
    assert {plan1.worker.name, plan2.worker.name} == {"w0", "w1"}  # one place each: both used

    with pytest.raises(NoCapacity) as full:
        await store.resumes.begin(a3, "op3")
    assert full.value.message == (
        "no worker has room for the actor demo/a3: 2 workers: 2 busy (a worker hosts one actor)"
    )
    assert (await store.actors.get(a3)).state == "SUSPENDED"  # refused: nothing changed

    with pytest.raises(FailedPrecondition, match=r"cannot be resumed from state RESUMING"):
        await store.resumes.begin(a1, "another-op")
    with pytest.raises(FailedPrecondition, match=r"is not suspended \(state: RESUMING\)"):
        await store.actors.delete(a1)

    await store.resumes.finish(a1, "op1")
    await store.resumes.finish(a1, "op1")  # idempotent
    actor = await store.actors.get(a1)
    assert (actor.state, actor.worker.name if actor.worker else None) == ("RUNNING", plan1.worker.name)
    assert (await store.resumes.begin(a1, "op-any")).already_running

    await store.resumes.rollback(a2, "op2", "restore failed: boom")
    actor2 = await store.actors.get(a2)
    assert (actor2.state, actor2.worker, actor2.last_error) == ("SUSPENDED", None, "restore failed: boom")
    plan3 = await store.resumes.begin(a3, "op3")  # a2's place is free again
    assert plan3.worker is not None and plan3.worker.name == plan2.worker.name


async def test_suspend_reserves_a_generation_and_frees_the_worker(store: Store) -> None:
    await store.nodes.register("n1", "127.0.0.1:1", "v", [worker("w0")])
    await ready_template(store)
    a1, a2 = ActorRef("demo", "a1"), ActorRef("demo", "a2")
    await store.actors.create(a1, "counter", {})
    await store.actors.create(a2, "counter", {})
    assert (await store.suspends.begin(a1, "s0")).already_suspended

    await store.resumes.begin(a1, "r1")
    await store.resumes.finish(a1, "r1")
    plan = await store.suspends.begin(a1, "s1")
    assert plan.snapshot is not None and plan.snapshot.generation == 1 and plan.snapshot.scope == SnapshotScope.FULL
    # <location>/<atespace>/actors/<name>/<generation>-<first 12 hex of sha256("s1")>
    assert plan.snapshot.uri == "file:///snap/demo/actors/a1/1-e8bc163c82ee"
    again = await store.suspends.begin(a1, "s1")
    assert again.snapshot is not None and again.snapshot.snapshot_id == plan.snapshot.snapshot_id
    with pytest.raises(FailedPrecondition, match=r"cannot be resumed from state SUSPENDING"):
        await store.resumes.begin(a1, "r-during-suspend")

    await store.suspends.complete(a1, "s1", plan.snapshot.snapshot_id, {"files": [{"path": "x"}]}, 123)
    await store.suspends.complete(a1, "s1", plan.snapshot.snapshot_id, {"files": [{"path": "x"}]}, 123)  # repeat
    actor = await store.actors.get(a1)
    assert actor.state == "SUSPENDED" and actor.worker is None
    assert actor.latest_snapshot is not None and (actor.latest_snapshot.generation, actor.latest_snapshot.state) == (
        1,
        "COMPLETED",
    )
    # the only place is free again, and a2's first resume uses the golden snapshot
    plan2 = await store.resumes.begin(a2, "r2")
    assert plan2.snapshot is not None and "/templates/counter/" in plan2.snapshot.uri
    # a1 resumes from its own generation 1 once a place is free
    await store.resumes.rollback(a2, "r2", "test")
    plan1 = await store.resumes.begin(a1, "r3")
    assert plan1.snapshot is not None and plan1.snapshot.generation == 1 and "/actors/a1/" in plan1.snapshot.uri


async def test_failed_checkpoint_rolls_back_to_running_and_drops_the_pending_snapshot(store: Store) -> None:
    await store.nodes.register("n1", "127.0.0.1:1", "v", [worker("w0")])
    await ready_template(store)
    a1 = ActorRef("demo", "a1")
    await store.actors.create(a1, "counter", {})
    await store.resumes.begin(a1, "r1")
    await store.resumes.finish(a1, "r1")
    plan = await store.suspends.begin(a1, "s1")
    assert plan.snapshot is not None
    await store.suspends.rollback(a1, "s1", plan.snapshot.snapshot_id, "checkpoint failed")
    actor = await store.actors.get(a1)
    assert (actor.state, actor.last_error, actor.latest_snapshot) == ("RUNNING", "checkpoint failed", None)
    retry = await store.suspends.begin(a1, "s2")
    assert retry.snapshot is not None and retry.snapshot.generation == 1  # the dropped row left no gap


async def test_placement_says_which_check_removed_the_last_candidates(store: Store) -> None:
    a = ActorRef("demo", "a1")
    await store.atespaces.create("demo")
    await store.templates.create("demo", "counter", ActorTemplateSpec.from_document(SPEC))
    with pytest.raises(NoCapacity, match="no worker is registered"):
        await store.golden_snapshots.begin("demo", "counter", "g")
    await store.nodes.register("n1", "127.0.0.1:1", "v", [worker("w0", labels={"zone": "a"})])
    plan = await store.golden_snapshots.begin("demo", "counter", "g2")
    await store.golden_snapshots.complete("demo", "counter", plan.snapshot.snapshot_id, {}, 1)
    await store.actors.create(a, "counter", {"zone": "b"})
    with pytest.raises(NoMatchingWorker) as labels:
        await store.resumes.begin(a, "r1")
    assert labels.value.message == (
        "no worker has room for the actor demo/a1: 1 worker: 1 without labels zone=b; no worker can take it as "
        "configured: label a worker pool zone=b or change the actor's worker_selector (or the template's "
        "workerSelector)"
    )
    await store.actors.update_selector(a, {"zone": "a"})
    await store.nodes.register("n1", "127.0.0.1:1", "v", [])  # the node stops reporting w0
    [w] = await store.nodes.list_workers()
    assert w.state == "UNAVAILABLE"
    with pytest.raises(NoCapacity) as unavailable:
        await store.resumes.begin(a, "r2")
    assert not isinstance(unavailable.value, NoMatchingWorker)  # it may come back: momentary
    assert unavailable.value.message == "no worker has room for the actor demo/a1: 1 worker: 1 UNAVAILABLE"
    await store.nodes.register("n1", "127.0.0.1:1", "v", [worker("w0", labels={"zone": "a"})])
    assert (await store.resumes.begin(a, "r3")).worker is not None


async def test_cpu_limits_are_a_placement_check(store: Store) -> None:
    """A worker hosts one actor, so its cpu is what one actor may have: 1500m does not fit 1000m."""
    big = dict(SPEC, resources={"limits": {"cpu": "1500m", "memory": "256Mi"}})
    small = WorkerRegistration(name="w0", pool="default", ip="10.0.0.1", sandbox_class="gvisor", labels={},
                               places=1, cpu_millis=1000, memory_bytes=2 * GIB)  # fmt: skip
    await store.nodes.register("n1", "127.0.0.1:1", "v", [small])
    await store.atespaces.create("demo")
    await store.templates.create("demo", "counter", ActorTemplateSpec.from_document(big))
    with pytest.raises(NoMatchingWorker) as refused:  # a bigger worker will not appear by waiting
        await store.golden_snapshots.begin("demo", "counter", "g")
    assert refused.value.message == (
        "no worker has room for the golden boot of template demo/counter: 1 worker: 1 with less than 1500m CPU "
        "free; no worker can take it as configured: lower the template's resources.limits or add a worker pool "
        "with more capacity"
    )


async def test_list_actors_pages_in_key_order(store: Store) -> None:
    await store.atespaces.create("demo")
    await store.atespaces.create("other")
    await store.templates.create("demo", "counter", ActorTemplateSpec.from_document(SPEC))
    await store.templates.create("other", "counter", ActorTemplateSpec.from_document(SPEC))
    for name in ("e", "a", "c", "b", "d"):
        await store.actors.create(ActorRef("demo", name), "counter", {})
    await store.actors.create(ActorRef("other", "a"), "counter", {})
    seen: list[str] = []
    after = None
    pages = 0
    while True:
        page, after = await store.actors.page("demo", after, 2)
        pages += 1
        seen += [a.name for a in page]
        if after is None:
            break
    assert (seen, pages) == (["a", "b", "c", "d", "e"], 3)
    everything, _ = await store.actors.page(None, None, 100)
    assert [f"{a.atespace}/{a.name}" for a in everything] == [
        "demo/a",
        "demo/b",
        "demo/c",
        "demo/d",
        "demo/e",
        "other/a",
    ]


async def test_concurrent_resumes_never_overbook_a_worker(store: Store) -> None:
    """Many resumes at once onto few places: each place is bound at most once.

    Two workers with one place each, so at most 2 of the 16 resumes can bind; the rest must be
    refused with NoCapacity. (Under READ COMMITTED, a room check that reads the placements in the
    same statement as it locks the worker row sees a snapshot from before the lock, so two binds
    could both see a free place: the atelet then refused one with "worker ... is busy".)
    """
    import asyncio

    await store.nodes.register("n1", "127.0.0.1:1", "v", [worker("w0"), worker("w1")])
    await ready_template(store)
    refs = [ActorRef("demo", f"c{i}") for i in range(16)]
    for ref in refs:
        await store.actors.create(ref, "counter", {})
    for attempt in range(5):  # the race needs the binds to overlap: try a few rounds
        outcomes = await asyncio.gather(
            *(store.resumes.begin(ref, f"op-{attempt}-{ref.name}") for ref in refs), return_exceptions=True
        )
        bound = [o for o in outcomes if not isinstance(o, BaseException)]
        refused = [o for o in outcomes if isinstance(o, NoCapacity)]
        assert len(bound) + len(refused) == len(refs), [o for o in outcomes if isinstance(o, BaseException)]
        per_worker = await store.pool.fetch("SELECT worker_id, count(*) AS n FROM placements GROUP BY worker_id")
        assert all(row["n"] <= 1 for row in per_worker), [dict(r) for r in per_worker]
        assert len(bound) == 2
        for ref, outcome in zip(refs, outcomes, strict=True):
            if not isinstance(outcome, BaseException):
                await store.resumes.rollback(ref, f"op-{attempt}-{ref.name}", "test: free the place again")
