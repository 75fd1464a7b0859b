"""Domain values the workflow tests script their fakes with: actors, workers, snapshots, a spec.

All real `domain` dataclasses, shaped as the store would return them for the README's tour
(atespace `demo`, template `counter`, actor `c1`, the example counter template).
"""

from __future__ import annotations

from domain.operations.router_drain import RouterDrainResult
from domain.refs import ActorRef, SnapshotRef, WorkerRef
from domain.states import SnapshotScope, SnapshotStorage
from domain.templates import ActorTemplateSpec, Container, HttpGetProbe, ResourceLimits, Volume, VolumeMount

NODE = "node-a"
ATELET = "127.0.0.1:8085"

C1 = ActorRef(atespace="demo", name="c1")
"""The actor of the tour: `demo/c1`."""

SPEC = ActorTemplateSpec(
    containers=[
        Container(
            name="counter",
            image="oci:examples/counter/oci:latest",
            command=["/counter"],
            env={"DATA_DIR": "/data", "PORT": "8080"},
            port=8080,
            wakeup_probe=HttpGetProbe(port=8080, path="/readyz"),
            volume_mounts=[VolumeMount(name="data", mount_path="/data")],
        )
    ],
    limits=ResourceLimits.of("500m", "256Mi"),
    volumes=[Volume(name="data")],
)
"""examples/counter/template.yaml as the store parses it."""


def worker(number: int = 1, node: str = NODE) -> WorkerRef:
    """Worker `pool-a/w<number>` on `node`."""
    return WorkerRef(
        worker_id=number, pool="pool-a", name=f"w{number}", node=node, ip=f"10.88.0.{number + 1}", atelet_address=ATELET
    )


def actor(name: str) -> ActorRef:
    """Actor `demo/<name>`."""
    return ActorRef(atespace="demo", name=name)


MANIFEST = {"format": 1, "files": {"rootfs.tar": "sha256:0f0f"}}
"""A manifest as an atelet writes it for a finished checkpoint."""


def snapshot(
    generation: int = 3,
    *,
    snapshot_id: int | None = None,
    local: bool = False,
    owner: str = "demo/actors/c1",
    scope: SnapshotScope = SnapshotScope.FULL,
    manifest: dict[str, object] | None = None,
) -> SnapshotRef:
    """Generation `generation` of `owner` in the storage location, or on NODE when `local`; a
    COMPLETED one carries its `manifest`, a PENDING (reserved) one none."""
    sid = snapshot_id if snapshot_id is not None else 100 + generation + (50 if local else 0)
    if local:
        return SnapshotRef(
            snapshot_id=sid,
            generation=generation,
            scope=scope,
            uri=f"local:///{owner}/{generation}-op",
            manifest=manifest,
            storage=SnapshotStorage.LOCAL,
            node=NODE,
        )
    return SnapshotRef(
        snapshot_id=sid,
        generation=generation,
        scope=scope,
        uri=f"file:///snapshots/{owner}/{generation}",
        manifest=manifest,
    )


DRAINED = RouterDrainResult(drain_id=1, acknowledged=["router-a"], waited_seconds=0.01)
"""What `drain_routers` answers: one router replica acknowledged the drain."""
