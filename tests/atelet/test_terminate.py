"""Terminate with ``started_by`` stops only the sandbox one of those Run/Restore operations
started: a rollback that reaches the node late leaves the actor's next sandbox alone (a hollow
atelet over real gRPC: which sandbox to stop is decided before any runsc call)."""

from __future__ import annotations

from pathlib import Path

import pytest

from atelet.proto import atelet_pb2 as pb
from tests.atelet.conftest import counter_spec, make_settings, running_atelet

pytestmark = [pytest.mark.asyncio]

C1 = pb.ActorRef(atespace="demo", name="c1")


async def test_a_terminate_for_another_operations_sandbox_leaves_it_running(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, hollow=True)
    async with running_atelet(settings) as a:
        await a.stub.Restore(pb.RestoreRequest(
            operation_id="resume-2/restore", worker="default-0", actor=C1, spec=counter_spec(),
            snapshot_uri=f"file://{Path(settings.snapshot_roots[0]).resolve()}/demo/c1/1",
        ))  # fmt: skip
        # the rollback of an earlier resume of c1 (resume-1), late
        late = await a.stub.Terminate(pb.TerminateRequest(
            operation_id="resume-1/terminate", worker="default-0", actor=C1,
            started_by=["resume-1/run", "resume-1/restore"],
        ))  # fmt: skip
        assert not late.was_running
        health = await a.stub.Health(pb.HealthRequest())
        assert health.workers[0].sandbox_state == "running"
        own = await a.stub.Terminate(pb.TerminateRequest(
            operation_id="resume-2/terminate", worker="default-0", actor=C1,
            started_by=["resume-2/run", "resume-2/restore"],
        ))  # fmt: skip
        assert own.was_running
        assert (await a.stub.Health(pb.HealthRequest())).workers[0].sandbox_state == "idle"
        # without started_by (a revert, a forced delete): whatever runs
        await a.stub.Run(pb.RunRequest(operation_id="resume-3/run", worker="default-0", actor=C1,
                                       spec=counter_spec()))
        assert (await a.stub.Terminate(pb.TerminateRequest(operation_id="revert-1/terminate", worker="default-0",
                                                           actor=C1))).was_running
