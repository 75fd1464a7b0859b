"""ResumeActor's restore activity marks the actor RUNNING itself (`AteletRunInput.mark_running`),
on a real store and a real hollow atelet: the commit follows the atelet's answer in the same
activity, a repeat after that commit answers success without calling the atelet again, and
without the flag the actor stays RESUMING for the workflow's own finalize step."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.atelet import AteletActivities
from activities.store import Store
from activities.store.records import WorkerRegistration
from domain.operations.atelet_calls import AteletRunInput
from domain.refs import ActorRef
from domain.states import SnapshotScope
from tests.activities.test_store import GIB, SPEC, ready_template
from tests.atelet.conftest import build_counter_image, make_settings, running_atelet
from tests.tls import control_plane_tls

C1 = ActorRef("demo", "c1")


@pytest.fixture(scope="module")
def counter_image() -> str:
    """The example counter's image reference (built once)."""
    return build_counter_image()


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


async def resuming(store: Store, image: str, node: str, listen: str, snapshot_root: Path, op: str) -> AteletRunInput:
    """Actor demo/c1 RESUMING under `op` on the node's worker, and the restore call its workflow makes
    (its snapshot URI under the atelet's snapshot root, which a hollow atelet accepts unread)."""
    await store.nodes.register(node, listen, "hollow", [default_worker(0), default_worker(1)])
    await ready_template(store, SPEC | {"containers": [{"name": "c", "image": image}]})
    await store.actors.create(C1, "counter", {})
    plan = await store.resumes.begin(C1, op)
    assert plan.worker is not None and plan.spec is not None and plan.snapshot is not None
    snapshot = replace(plan.snapshot, uri=f"file://{snapshot_root}/demo/c1/1", scope=SnapshotScope.FULL)
    return AteletRunInput(
        operation_id=op,
        worker=plan.worker,
        holder=C1,
        spec=plan.spec,
        snapshot=snapshot,
        probe_timeout_seconds=5.0,
        mark_running=True,
    )


async def test_the_restore_marks_the_actor_running_and_a_repeat_answers_without_the_atelet(
    store: Store, tmp_path: Path, counter_image: str
) -> None:
    settings = make_settings(tmp_path, hollow=True)
    root = Path(settings.snapshot_roots[0]).resolve()
    call = await resuming(store, counter_image, settings.node, settings.listen, root, "op-1")
    activities = AteletActivities(store, tls=control_plane_tls(), call_timeout_seconds=10)
    try:
        async with running_atelet(settings):
            before = time.time()
            result = await ActivityEnvironment().run(activities.start, call)
            after = time.time()
        actor = await store.actors.get(C1)
        assert (actor.state, actor.operation_id) == ("RUNNING", "op-1")
        assert result.marked_running_at is not None and before <= result.marked_running_at <= after
        assert result.timings["finalize"] > 0
        assert await store.resumes.finished(C1, "op-1")
        assert not await store.resumes.finished(C1, "op-2")
        # The atelet is gone now: a repeat (the first answer was lost) must not need it.
        retry = ActivityEnvironment()
        retry.info = replace(retry.info, attempt=2)
        again = await retry.run(activities.start, call)
        assert again.marked_running_at is None and again.worker_ip == call.worker.ip
    finally:
        await activities.close()


async def test_without_mark_running_the_actor_stays_resuming(store: Store, tmp_path: Path, counter_image: str) -> None:
    settings = make_settings(tmp_path, hollow=True)
    root = Path(settings.snapshot_roots[0]).resolve()
    call = replace(
        await resuming(store, counter_image, settings.node, settings.listen, root, "op-1"), mark_running=False
    )
    activities = AteletActivities(store, tls=control_plane_tls(), call_timeout_seconds=10)
    try:
        async with running_atelet(settings):
            result = await ActivityEnvironment().run(activities.start, call)
    finally:
        await activities.close()
    assert result.marked_running_at is None and "finalize" not in result.timings
    actor = await store.actors.get(C1)
    assert (actor.state, actor.operation_id) == ("RESUMING", "op-1")
    assert not await store.resumes.finished(C1, "op-1")
