"""The atelet writes a sandbox's CPU limit only into a cgroup runsc made for that sandbox's
container; a sandbox found in another cgroup is started again with the limit in its bundle, which
runsc applies itself (real runsc, real cgroups)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import httpx
import pytest

from atelet.cgroups import SharedCgroup, set_cpu_limit
from atelet.drivers.gvisor import CPU_MILLIS_ANNOTATION, limit_in_bundle
from atelet.node import Node
from atelet.pool import default_pool
from atelet.proto import atelet_pb2 as pb
from tests.atelet.conftest import counter_spec, cpu_limit_of_pid, force_cleanup, make_settings


def test_a_limit_is_not_written_into_a_cgroup_that_does_not_name_the_container(tmp_path: Path) -> None:
    # This test process's own CPU cgroup, laid out under a stand-in root for cgroup v1 and v2:
    # it is no container's, so nothing may be written into it.
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(",") or controllers == "":
            directory = tmp_path / (controllers if controllers else "") / path.lstrip("/")
            directory.mkdir(parents=True, exist_ok=True)
            for name, value in (("cpu.cfs_quota_us", "-1"), ("cpu.cfs_period_us", "100000"), ("cpu.max", "max 100000")):
                (directory / name).write_text(value)
    before = {p: p.read_text() for p in tmp_path.rglob("cpu.*")}
    with pytest.raises(SharedCgroup, match="not one runsc made for it"):
        set_cpu_limit(os.getpid(), 500, "default-0-0123456789", root=tmp_path)
    assert {p: p.read_text() for p in tmp_path.rglob("cpu.*")} == before


def test_the_limit_moves_from_the_annotation_into_the_bundles_resources(tmp_path: Path) -> None:
    config = {"annotations": {CPU_MILLIS_ANNOTATION: "500", "other": "kept"},
              "linux": {"resources": {"memory": {"limit": 268435456}}}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    limit_in_bundle(tmp_path)
    moved = json.loads((tmp_path / "config.json").read_text())
    assert moved["annotations"] == {"other": "kept"}
    # 500 millicores: 50 ms of CPU time every 100 ms period (the OCI runtime spec's quota/period, µs)
    assert moved["linux"]["resources"] == {"memory": {"limit": 268435456},
                                           "cpu": {"quota": 50000, "period": 100000}}


@pytest.mark.runsc
@pytest.mark.asyncio
async def test_a_sandbox_in_a_shared_cgroup_is_started_again_with_the_limit_in_its_bundle(
        short_tmp: Path, counter_image: str) -> None:
    settings = make_settings(short_tmp)
    node = Node(settings, [default_pool(2)])
    driver = node.drivers["gvisor"]
    shared = f"ate-shared-{uuid.uuid4().hex[:8]}"
    prepare = driver.prepare

    async def prepare_in_a_shared_cgroup(*args: object, **kwargs: object) -> Path:
        # A runtime that puts every sandbox in one cgroup: the bundle names one without the ID.
        bundle: Path = await prepare(*args, **kwargs)  # type: ignore[arg-type]
        config = json.loads((bundle / "config.json").read_text())
        config["linux"]["cgroupsPath"] = f"/{shared}"
        (bundle / "config.json").write_text(json.dumps(config))
        return bundle

    driver.prepare = prepare_in_a_shared_cgroup  # type: ignore[method-assign]
    await node.start()
    try:
        run = await node.run(pb.RunRequest(operation_id=f"op-{uuid.uuid4().hex[:8]}", worker="default-0",
                                           actor=pb.ActorRef(atespace="demo", name="c1"),
                                           spec=counter_spec(counter_image), probe_timeout_seconds=20))
        assert driver.limit_at_start  # seen once: every later start puts the limit in the bundle
        [container_id] = await driver.list()
        state = await driver.runsc.state(container_id)
        assert state is not None and state["status"] == "running"
        pid = int(state["pid"])
        assert f"/{shared}" in Path(f"/proc/{pid}/cgroup").read_text()
        assert cpu_limit_of_pid(pid) == (50_000, 100_000)  # the template's 500m, applied by runsc
        async with httpx.AsyncClient(timeout=5) as client:
            reply = await client.get(f"http://{run.worker_ip}:8080/", headers={"Connection": "close"})
        assert reply.status_code == 200 and reply.json()["memory_count"] == 1
    finally:
        await node.stop()
        force_cleanup(settings)
        for hierarchy in Path("/sys/fs/cgroup").iterdir():
            for leftover in (hierarchy / shared, Path("/sys/fs/cgroup") / shared):
                if leftover.is_dir():
                    leftover.rmdir()
