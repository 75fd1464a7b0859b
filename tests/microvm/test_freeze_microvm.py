"""Freeze and Thaw of a microvm worker's sandbox on real QEMU (TCG): QMP ``stop`` holds the VM
with its memory, it answers nothing while frozen, and ``cont`` lets the counter go on (one boot)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import httpx
import pytest

from atelet.proto import atelet_pb2 as pb
from tests.atelet.conftest import Atelet
from tests.microvm.test_atelet_microvm import ACTOR, atelet, get, op, qemu_pids, run_counter  # noqa: F401

pytestmark = [pytest.mark.qemu, pytest.mark.timeout(300), pytest.mark.asyncio]


def cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` (all its threads), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def test_a_frozen_vm_answers_nothing_and_thaws_with_its_memory(
        atelet: Atelet, counter_image: str) -> None:  # noqa: F811
    run = await run_counter(atelet, "microvm-0")
    assert [(await get(run.worker_ip))["memory_count"] for _ in range(2)] == [1, 2]
    [qemu] = qemu_pids(atelet.settings)

    frozen = await atelet.stub.Freeze(pb.FreezeRequest(operation_id=op(), worker="microvm-0", actor=ACTOR))
    assert (frozen.already_frozen, frozen.method) == (False, "qmp stop")
    assert (await atelet.stub.Freeze(pb.FreezeRequest(operation_id=op(), worker="microvm-0", actor=ACTOR))
            ).already_frozen
    [w0, _] = (await atelet.stub.Health(pb.HealthRequest())).workers
    assert (w0.sandbox_state, w0.frozen) == ("running", True)
    before = cpu_seconds(qemu)
    with pytest.raises(httpx.HTTPError):
        async with httpx.AsyncClient(timeout=1, trust_env=False) as client:
            await client.get(f"http://{run.worker_ip}:8080/", headers={"Connection": "close"})
    frozen_cpu = cpu_seconds(qemu) - before

    started = time.monotonic()
    thaw = await atelet.stub.Thaw(pb.ThawRequest(operation_id=op(), worker="microvm-0", actor=ACTOR))
    assert (thaw.was_frozen, thaw.method) == (True, "qmp cont")
    assert (await get(run.worker_ip))["memory_count"] == 3
    thaw_and_get = time.monotonic() - started
    # the guest's clock stood still while frozen (QEMU's virtual clock stops): the thaw set it
    # (right after its answer: within the guest channel's 0.2 s poll)
    await asyncio.sleep(0.5)
    clock = await atelet.stub.Exec(pb.ExecRequest(operation_id=op(), worker="microvm-0", actor=ACTOR,
                                                  command=["date", "+%s"]))  # fmt: skip
    assert abs(int(clock.stdout) - time.time()) <= 1.5, (clock.stdout, time.time())
    assert not (await atelet.stub.Thaw(pb.ThawRequest(operation_id=op(), worker="microvm-0", actor=ACTOR))
                ).was_frozen

    await atelet.stub.Freeze(pb.FreezeRequest(operation_id=op(), worker="microvm-0", actor=ACTOR))
    done = await atelet.stub.Terminate(pb.TerminateRequest(operation_id=op(), worker="microvm-0", actor=ACTOR))
    assert done.was_running
    assert qemu_pids(atelet.settings) == []
    print(f"microvm: freeze {frozen.freeze_seconds * 1000:.1f} ms, thaw {thaw.thaw_seconds * 1000:.1f} ms, "
          f"Thaw + GET {thaw_and_get * 1000:.0f} ms; QEMU CPU while frozen {frozen_cpu * 1000:.0f} ms over ~1 s")
