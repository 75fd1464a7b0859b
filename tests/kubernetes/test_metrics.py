"""`ate_workerpool_workers{pool,state}`: what a HorizontalPodAutoscaler scales a pool on."""

from __future__ import annotations

from prometheus_client import generate_latest

from controller.metrics import set_workers
from domain.refs import ActorRef
from store import Store
from tests.activities.test_store import ready_template, worker


async def test_workers_are_counted_assigned_idle_or_unavailable(store: Store) -> None:
    await store.nodes.register("n1", "127.0.0.1:1", "v", [worker("w0"), worker("w1"), worker("w2")])
    await ready_template(store)
    ref = ActorRef("demo", "a1")
    await store.actors.create(ref, "counter", {})
    plan = await store.resumes.begin(ref, "r1")  # one worker now holds an actor
    assert plan.worker is not None
    idle = [w for w in ("w0", "w1", "w2") if w != plan.worker.name]
    unavailable = next(w for w in await store.nodes.list_workers() if w.name == idle[0])
    await store.nodes.fence_worker(unavailable.worker_id, "test")
    counts = set_workers(await store.nodes.list_workers())
    pool = unavailable.pool
    assert counts == {(pool, "assigned"): 1, (pool, "idle"): 1, (pool, "unavailable"): 1}
    text = generate_latest().decode()
    assert f'ate_workerpool_workers{{pool="{pool}",state="assigned"}} 1.0' in text
    assert f'ate_workerpool_workers{{pool="{pool}",state="idle"}} 1.0' in text
