"""The labels the activities give a sandbox's output (activities/atelet_wire.py): the template's
name, and the generation of the actor's own snapshot it is restored from, 0 for its template's
golden snapshot (taken of the template's holder, not of the actor) and for a boot."""

from __future__ import annotations

from activities.atelet_wire import own_generation, workload_spec
from domain.refs import ActorRef, SnapshotRef
from domain.states import SnapshotScope
from domain.templates import ActorTemplateSpec

C1 = ActorRef("demo", "c1")


def snapshot(generation: int, taken_of: dict[str, str] | None) -> SnapshotRef:
    manifest = {"sandbox_class": "gvisor", "actor": taken_of} if taken_of is not None else {}
    return SnapshotRef(snapshot_id=9, generation=generation, scope=SnapshotScope.FULL, uri="file:///s", manifest=manifest)


def test_the_generation_is_the_actors_own_snapshots_else_zero() -> None:
    assert own_generation(snapshot(4, {"atespace": "demo", "name": "c1"}), C1) == 4
    assert own_generation(snapshot(1, {"atespace": "demo", "name": "template-counter"}), C1) == 0  # golden
    assert own_generation(snapshot(3, {"atespace": "other", "name": "c1"}), C1) == 0  # another atespace's c1
    assert own_generation(snapshot(2, None), C1) == 0  # no manifest recorded
    assert own_generation(None, C1) == 0  # a boot


def test_the_workload_spec_carries_the_labels() -> None:
    spec = ActorTemplateSpec.from_document({"containers": [{"name": "c", "image": "oci:x:latest", "port": 80}]})
    message = workload_spec(spec, "counter", 4)
    assert (message.template, message.generation, [c.name for c in message.containers]) == ("counter", 4, ["c"])
