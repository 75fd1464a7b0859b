"""Registration and heartbeats reach the API server (hollow atelet, a stand-in HTTP server)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from atelet.proto import atelet_pb2 as pb
from tests.atelet.conftest import counter_spec, make_settings, running_atelet
from tests.atelet.fake_api import FakeApi, fake_api

pytestmark = [pytest.mark.asyncio]


async def beats(api: FakeApi, n: int) -> None:
    for _ in range(200):
        if len(api.of("PUT", "")) >= n:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"fewer than {n} heartbeats")


async def test_registers_and_heartbeats_with_what_runs(tmp_path: Path) -> None:
    with fake_api() as api:
        settings = make_settings(tmp_path, hollow=True, api_server=api.url, heartbeat_seconds=0.1)
        async with running_atelet(settings) as a:
            await beats(api, 2)
            first = api.of("PUT", "")[0]
            await a.stub.Run(pb.RunRequest(operation_id=uuid.uuid4().hex, worker="default-1",
                                           actor=pb.ActorRef(atespace="demo", name="c1"), spec=counter_spec()))
            await beats(api, len(api.of("PUT", "")) + 2)
            last = api.of("PUT", "")[-1]
    assert first.path == f"/v1/nodes/{settings.node}"
    assert {r.node for r in api.received} == {settings.node}  # every beat proved by the node's certificate
    assert first.body["address"] == settings.listen
    assert [w["name"] for w in first.body["workers"]] == ["default-0", "default-1"]
    assert set(first.body["workers"][0]) == {"name", "pool", "ip", "sandbox_class", "runtime_version", "labels",
                                             "places", "cpu_millis", "memory_bytes", "actor", "sandbox_state",
                                             "egress_active"}
    # a gvisor worker's runtime is the node's runsc build (runsc --version names it)
    assert first.body["workers"][0]["runtime_version"] == first.body["runsc_version"] != ""
    assert [w["actor"] for w in first.body["workers"]] == [None, None]
    assert [w["sandbox_state"] for w in first.body["workers"]] == ["idle", "idle"]
    assert [w["actor"] for w in last.body["workers"]] == [None, {"atespace": "demo", "name": "c1"}]
    assert [w["sandbox_state"] for w in last.body["workers"]] == ["idle", "running"]
    assert [w["egress_active"] for w in last.body["workers"]] == [False, False]  # no egress proxy here


async def test_terminate_in_the_answer_fences_and_an_old_answer_does_not(tmp_path: Path) -> None:
    with fake_api() as api:
        api.old_api = True  # answers 200 with no body at all
        settings = make_settings(tmp_path, hollow=True, api_server=api.url, heartbeat_seconds=0.1)
        async with running_atelet(settings) as a:
            for worker, name in (("default-0", "c1"), ("default-1", "c2")):
                await a.stub.Run(pb.RunRequest(operation_id=uuid.uuid4().hex, worker=worker,
                                               actor=pb.ActorRef(atespace="demo", name=name), spec=counter_spec()))
            await beats(api, len(api.of("PUT", "")) + 3)
            health = await a.stub.Health(pb.HealthRequest())
            assert [w.sandbox_state for w in health.workers] == ["running", "running"]

            api.old_api = False
            api.terminate = [{"worker": "default-1", "actor": {"atespace": "demo", "name": "c2"}}]
            await beats(api, len(api.of("PUT", "")) + 3)
            health = await a.stub.Health(pb.HealthRequest())
            assert [w.sandbox_state for w in health.workers] == ["running", "idle"]
            assert [w.actor.name for w in health.workers] == ["c1", ""]
