"""A boot whose wakeup probe never answers fails once the probe's timeout passes, for good
(FAILED_PRECONDITION: retrying the same boot would wait as long again), with a reason that names
the probe and the container and gives the workload's last log line, and leaves the worker free (real runsc, real gRPC)."""

from __future__ import annotations

import time
import uuid

import grpc
import pytest

from atelet.proto import atelet_pb2 as pb
from tests.atelet.conftest import Atelet, counter_spec

pytestmark = [pytest.mark.runsc, pytest.mark.asyncio]
ACTOR = pb.ActorRef(atespace="demo", name="c1")


def op() -> str:
    return f"op-{uuid.uuid4().hex[:12]}"


async def test_a_probe_on_a_port_nothing_listens_on_fails_at_its_timeout(atelet: Atelet, counter_image: str) -> None:
    spec = counter_spec(counter_image)
    spec.containers[0].wakeup_probe.port = 9999  # the counter listens on 8080
    started = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await atelet.stub.Run(
            pb.RunRequest(operation_id=op(), worker="default-0", actor=ACTOR, spec=spec, probe_timeout_seconds=2)
        )
    waited = time.monotonic() - started
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    reason, _, said = err.value.details().partition("; last log line: ")
    assert reason == "wakeup probe GET :9999/readyz of container counter got no answer in 2 s (last: no connection)"
    # what the counter logged last (examples/counter/main.go) names the port it listens on
    assert said.endswith("counter: listening on 0.0.0.0:8080, data dir /data"), err.value.details()
    assert waited >= 2, waited  # it waited out the probe's timeout (no retry here: that is the workflow's call)

    health = {w.name: w.sandbox_state for w in (await atelet.stub.Health(pb.HealthRequest())).workers}
    assert health["default-0"] == "idle"  # the failed boot left nothing behind
    good = await atelet.stub.Run(
        pb.RunRequest(
            operation_id=op(), worker="default-0", actor=ACTOR, spec=counter_spec(counter_image), probe_timeout_seconds=20
        )
    )
    assert good.worker_ip
    await atelet.stub.Terminate(pb.TerminateRequest(operation_id=op(), worker="default-0", actor=ACTOR))
