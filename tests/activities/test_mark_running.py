"""ResumeActor's activities that mark the actor RUNNING themselves, on a real store and a real
hollow atelet: `atelet_start` with `mark_running` commits right after the atelet's answer, and
`place_and_restore` places, restores and commits in one activity; a repeat after the commit
answers without calling the atelet again; without the flag the actor stays RESUMING for the
workflow's own finalize step; `Resumes.progress` tells what a failed resume left. Likewise
`atelet_checkpoint` with `complete_suspend` commits the suspend right after the checkpoint."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.atelet import AteletActivities
from atelet.proto import atelet_pb2 as pb
from atelet.settings import AteletSettings
from domain.failpoints import ENV as FAILPOINTS_ENV
from domain.operations.atelet_calls import AteletCheckpointInput, AteletRunInput
from domain.operations.resume import PlaceAndRestoreInput, ResumeProgress
from domain.refs import ActorRef
from domain.states import SnapshotScope
from store import Store
from store.records import WorkerRegistration
from tests.activities.test_store import GIB, SPEC, ready_template
from tests.atelet.conftest import build_counter_image, make_settings, running_atelet
from tests.tls import control_plane_tls

C1 = ActorRef("demo", "c1")


@pytest.fixture(scope="module")
def counter_image() -> str:
    """The example counter's image reference (built once)."""
    return build_counter_image()


@dataclass
class Hollow:
    """A hollow test atelet's settings (not started), its snapshot root, and the activities."""

    settings: AteletSettings
    root: Path
    activities: AteletActivities


@pytest.fixture
async def hollow(store: Store, tmp_path: Path) -> AsyncIterator[Hollow]:
    """Settings of a hollow atelet and the atelet activities on the store (closed afterwards)."""
    settings = make_settings(tmp_path, hollow=True)
    activities = AteletActivities(store, tls=control_plane_tls(), call_timeout_seconds=10)
    try:
        yield Hollow(settings, Path(settings.snapshot_roots[0]).resolve(), activities)
    finally:
        await activities.close()


def default_worker(index: int) -> WorkerRegistration:
    """The registration of a test atelet's worker `default-<index>` (atelet/workers.py names them)."""
    return WorkerRegistration(
        name=f"default-{index}",
        pool="default",
        ip=f"10.0.0.{index + 1}",
        sandbox_class="gvisor",
        labels={},
        places=1,
        cpu_millis=2000,
        memory_bytes=2 * GIB,
    )


def second_attempt() -> ActivityEnvironment:
    """An activity environment whose `activity.info().attempt` is 2 (a retry)."""
    environment = ActivityEnvironment()
    environment.info = replace(environment.info, attempt=2)
    return environment


async def resuming(store: Store, image: str, hollow: Hollow, op: str) -> AteletRunInput:
    """Actor demo/c1 RESUMING under `op` on the node's worker, and the restore call its workflow makes
    (its snapshot URI under the atelet's snapshot root, which a hollow atelet accepts unread)."""
    await store.nodes.register(
        hollow.settings.node, hollow.settings.listen, "hollow", [default_worker(0), default_worker(1)]
    )
    await ready_template(store, SPEC | {"containers": [{"name": "c", "image": image}]})
    await store.actors.create(C1, "counter", {})
    plan = await store.resumes.begin(C1, op)
    assert plan.worker is not None and plan.spec is not None and plan.snapshot is not None
    snapshot = replace(plan.snapshot, uri=f"file://{hollow.root}/demo/c1/1", scope=SnapshotScope.FULL)
    return AteletRunInput(
        operation_id=op,
        worker=plan.worker,
        holder=C1,
        spec=plan.spec,
        snapshot=snapshot,
        probe_timeout_seconds=5.0,
        mark_running=True,
    )


async def suspended_on_the_hollow_node(store: Store, hollow: Hollow, image: str) -> None:
    """Actor demo/c1 SUSPENDED at its template's golden snapshot, the hollow node's two workers free."""
    settings = hollow.settings
    await store.nodes.register(settings.node, settings.listen, "hollow", [default_worker(0), default_worker(1)])
    await ready_template(store, SPEC | {"containers": [{"name": "c", "image": image}]})
    await store.actors.create(C1, "counter", {})
    # The golden snapshot's URI is the template's storage location, which this hollow atelet
    # does not serve: point the template's golden snapshot at its snapshot root.
    async with store.pool.acquire() as connection:
        await connection.execute("UPDATE snapshots SET uri = $1", f"file://{hollow.root}/demo/templates/counter/0")


async def test_the_restore_marks_the_actor_running_and_a_repeat_answers_without_the_atelet(
    store: Store, hollow: Hollow, counter_image: str
) -> None:
    call = await resuming(store, counter_image, hollow, "op-1")
    async with running_atelet(hollow.settings):
        before = time.time()
        result = await ActivityEnvironment().run(hollow.activities.start, call)
        after = time.time()
    actor = await store.actors.get(C1)
    assert (actor.state, actor.operation_id) == ("RUNNING", "op-1")
    assert result.marked_running_at is not None and before <= result.marked_running_at <= after
    assert result.timings["finalize"] > 0
    assert await store.resumes.finished(C1, "op-1")
    assert not await store.resumes.finished(C1, "op-2")
    # The atelet is gone now: a repeat (the first answer was lost) must not need it.
    again = await second_attempt().run(hollow.activities.start, call)
    assert again.marked_running_at is None and again.worker_ip == call.worker.ip


async def test_without_mark_running_the_actor_stays_resuming(store: Store, hollow: Hollow, counter_image: str) -> None:
    call = replace(await resuming(store, counter_image, hollow, "op-1"), mark_running=False)
    async with running_atelet(hollow.settings):
        result = await ActivityEnvironment().run(hollow.activities.start, call)
    assert result.marked_running_at is None and "finalize" not in result.timings
    actor = await store.actors.get(C1)
    assert (actor.state, actor.operation_id) == ("RESUMING", "op-1")
    assert not await store.resumes.finished(C1, "op-1")


async def test_place_and_restore_places_restores_and_marks_running_and_a_retry_finds_it_done(
    store: Store, hollow: Hollow, counter_image: str
) -> None:
    settings = hollow.settings
    await suspended_on_the_hollow_node(store, hollow, counter_image)
    call = PlaceAndRestoreInput(actor=C1, operation_id="op-1", probe_timeout_seconds=5.0)
    async with running_atelet(settings):
        done = await ActivityEnvironment().run(hollow.activities.place_and_restore, call)
    assert not done.plan.already_running and done.plan.worker is not None
    assert done.plan.worker.name in ("default-0", "default-1") and done.placement_seconds > 0
    assert done.restored is not None and done.restored.marked_running_at is not None
    actor = await store.actors.get(C1)
    assert (actor.state, actor.operation_id) == ("RUNNING", "op-1")
    assert actor.worker is not None and actor.worker.name == done.plan.worker.name
    assert await store.resumes.progress(C1, "op-1") == ResumeProgress(running=True, worker=done.plan.worker)
    # The atelet is gone: a retry (the first answer was lost) finds the actor RUNNING under this
    # operation, says so, and calls nothing.
    again = await second_attempt().run(hollow.activities.place_and_restore, call)
    assert again.plan.already_running and again.resumed_earlier and again.restored is None
    # Another operation's first attempt is told the actor runs already, not that it resumed it.
    other = await ActivityEnvironment().run(
        hollow.activities.place_and_restore,
        PlaceAndRestoreInput(actor=C1, operation_id="op-2", probe_timeout_seconds=5),
    )
    assert other.plan.already_running and not other.resumed_earlier


async def test_place_and_restore_starts_nothing_once_a_revert_took_the_place_over(
    store: Store, hollow: Hollow, counter_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The activity goes on after a revert ended its workflow (test_lifecycle's stuck resume):
    once its place is gone it must not restore, or the node would run a second sandbox of the
    actor, which the actor's next resume shares its durable dirs with (CI run of stop 21: the
    resumed actor's /data vanished)."""
    await suspended_on_the_hollow_node(store, hollow, counter_image)
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()
    monkeypatch.setenv(FAILPOINTS_ENV, str(failpoints))
    armed = failpoints / "ResumeActor.atelet_call"
    armed.touch()
    call = PlaceAndRestoreInput(actor=C1, operation_id="op-1", probe_timeout_seconds=5.0)
    async with running_atelet(hollow.settings) as atelet:
        resume = asyncio.create_task(ActivityEnvironment().run(hollow.activities.place_and_restore, call))
        deadline = time.monotonic() + 20
        while not (failpoints / "ResumeActor.atelet_call.reached").exists():
            assert time.monotonic() < deadline and not resume.done(), "the activity never reached the atelet call"
            await asyncio.sleep(0.02)
        assert (await store.actors.get(C1)).state == "RESUMING"
        await store.reverts.begin(C1, "op-revert")
        await store.reverts.finish(C1, "op-revert", "reverted while the resume was stuck")
        armed.unlink()
        with pytest.raises(ApplicationError) as raised:
            await asyncio.wait_for(resume, 20)
        health = await atelet.stub.Health(pb.HealthRequest())
    assert raised.value.type == "Superseded" and raised.value.non_retryable
    assert [w.sandbox_state for w in health.workers] == ["idle", "idle"]  # no sandbox was started
    actor = await store.actors.get(C1)
    assert (actor.state, actor.worker) == ("SUSPENDED", None)


async def test_progress_of_a_resume_tells_bound_from_running_from_nothing(store: Store, tmp_path: Path) -> None:
    await store.nodes.register("n1", "127.0.0.1:1", "v", [default_worker(0)])
    await ready_template(store)
    await store.actors.create(C1, "counter", {})
    assert await store.resumes.progress(C1, "op-1") == ResumeProgress(running=False, worker=None)
    plan = await store.resumes.begin(C1, "op-1")
    assert await store.resumes.progress(C1, "op-1") == ResumeProgress(running=False, worker=plan.worker)
    assert await store.resumes.progress(C1, "op-other") == ResumeProgress(running=False, worker=None)
    await store.resumes.finish(C1, "op-1")
    assert await store.resumes.progress(C1, "op-1") == ResumeProgress(running=True, worker=plan.worker)
    assert await store.resumes.progress(ActorRef("demo", "nobody"), "op-1") == ResumeProgress(running=False)


async def test_the_checkpoint_completes_the_suspend_and_a_retry_answers_without_the_atelet(
    store: Store, hollow: Hollow, counter_image: str
) -> None:
    call = await resuming(store, counter_image, hollow, "op-1")
    async with running_atelet(hollow.settings):
        await ActivityEnvironment().run(hollow.activities.start, call)  # RUNNING on the hollow worker
        plan = await store.suspends.begin(C1, "op-s")
        assert plan.worker is not None and plan.snapshot is not None
        snapshot = replace(plan.snapshot, uri=f"file://{hollow.root}/demo/c1/2")
        checkpoint = AteletCheckpointInput(
            operation_id="op-s", worker=plan.worker, holder=C1, snapshot=snapshot, complete_suspend=True
        )
        before = time.time()
        done = await ActivityEnvironment().run(hollow.activities.checkpoint, checkpoint)
        after = time.time()
    assert done.completed_at is not None and before <= done.completed_at <= after
    actor = await store.actors.get(C1)
    assert actor.state == "SUSPENDED" and actor.worker is None
    assert actor.latest_snapshot is not None and actor.latest_snapshot.snapshot_id == snapshot.snapshot_id
    assert await store.suspends.completed(C1, snapshot.snapshot_id)
    # The atelet is gone and the worker free: a retry (the first answer was lost) must say the
    # suspend completed without calling it.
    again = await second_attempt().run(hollow.activities.checkpoint, checkpoint)
    assert again.completed_earlier and again.completed_at is None
