"""A frozen sandbox survives an atelet restart frozen: the next atelet adopts it as frozen (its
record says so), it uses no CPU until Thaw, and Thaw lets it answer with its memory (real runsc,
``python -m atelet`` processes, as ``test_adoption``)."""

from __future__ import annotations

import json
import time

import grpc
import pytest

from atelet.proto import atelet_pb2 as pb
from atelet.runsc import pid_alive
from tests.atelet.conftest import assert_nothing_left, counter_spec
from tests.atelet.fake_api import FakeApi
from tests.atelet.test_adoption import Agent, agent, api, get_count  # noqa: F401  (fixtures)
from tests.atelet.test_freeze import cpu_usage_ns, hammer

pytestmark = [pytest.mark.runsc, pytest.mark.asyncio]

F1 = pb.ActorRef(atespace="demo", name="fz1")


async def test_a_frozen_sandbox_is_adopted_frozen_and_thaws_after_a_restart(
        agent: Agent, api: FakeApi, counter_image: str) -> None:  # noqa: F811
    agent.start()
    channel, stub = agent.stub()
    async with channel:
        run = await stub.Run(pb.RunRequest(operation_id="fz-run-1", worker="default-0", actor=F1,
                                           spec=counter_spec(counter_image), probe_timeout_seconds=20))
        assert [await get_count(run.worker_ip) for _ in range(2)] == [1, 2]
        pid = agent.sandbox_pid("default-0")  # asks runsc: before the freeze
        await stub.Freeze(pb.FreezeRequest(operation_id="fz-freeze-1", worker="default-0", actor=F1))
    assert json.loads(agent.record("default-0").read_text())["frozen"] is True

    agent.sigkill()
    restart = agent.start()
    channel, stub = agent.stub()
    async with channel:
        [w0, _] = (await stub.Health(pb.HealthRequest())).workers
        assert (w0.sandbox_state, w0.frozen, w0.actor.name) == ("running", True, "fz1")
        assert "adopted sandbox" in agent.log_path.read_text()
        before = cpu_usage_ns(pid)
        answered, _ = await hammer(run.worker_ip, 1.0)
        assert (answered, cpu_usage_ns(pid) - before) == (0, 0)
        # a Freeze after the restart: already frozen
        again = await stub.Freeze(pb.FreezeRequest(operation_id="fz-freeze-2", worker="default-0", actor=F1))
        assert again.already_frozen

        thaw = await stub.Thaw(pb.ThawRequest(operation_id="fz-thaw-1", worker="default-0", actor=F1))
        assert thaw.was_frozen
        assert await get_count(run.worker_ip) == 3
        assert agent.sandbox_pid("default-0") == pid
        assert json.loads(agent.record("default-0").read_text())["frozen"] is False

        # frozen again, then the atelet stops (SIGTERM): its stop thaws and ends the sandbox
        await stub.Freeze(pb.FreezeRequest(operation_id="fz-freeze-3", worker="default-0", actor=F1))
        with pytest.raises(grpc.aio.AioRpcError) as busy:
            await stub.Run(pb.RunRequest(operation_id="fz-run-2", worker="default-0", actor=F1,
                                         spec=counter_spec(counter_image)))
        assert busy.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        # the Run that started it, repeated: its recorded answer, at once
        repeated = await stub.Run(pb.RunRequest(operation_id="fz-run-1", worker="default-0", actor=F1,
                                                spec=counter_spec(counter_image), probe_timeout_seconds=2))
        assert repeated.worker_ip == run.worker_ip
    stopping = time.monotonic()
    assert agent.sigterm() == 0
    assert time.monotonic() - stopping < 30
    assert not pid_alive(pid)
    assert_nothing_left(agent.settings)
    print(f"restart with a frozen sandbox: {restart:.2f}s; thaw {thaw.thaw_seconds * 1000:.2f} ms ({thaw.method})")
