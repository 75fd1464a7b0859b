"""Exec (issue 29) into a microvm sandbox on real QEMU (TCG), through ate's init in the guest over
its channel: a command runs next to the counter with its output and exit status, a long one is
killed by its timeout and is gone from the guest after, and a frozen VM refuses an exec.

Expected values: the counter's `count.txt` holds the number of requests it served
(examples/counter/main.go); busybox's `sh -c 'exit 3'` exits 3, `kill -9 $$` ends with 128 + 9;
a missing program exits 127 (POSIX: command not found)."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from atelet.proto import atelet_pb2 as pb
from tests.atelet.conftest import Atelet
from tests.atelet.test_exec import check_commands
from tests.microvm.test_atelet_microvm import ACTOR, atelet, get, op, run_counter  # noqa: F401

pytestmark = [pytest.mark.qemu, pytest.mark.timeout(300), pytest.mark.asyncio]


def exec_request(*command: str, timeout: float = 0, limit: int = 0) -> pb.ExecRequest:
    return pb.ExecRequest(operation_id=op(), worker="microvm-0", actor=ACTOR, command=list(command),
                          timeout_seconds=timeout, max_output_bytes=limit)  # fmt: skip


async def test_a_command_runs_in_the_guest_with_its_output_and_exit_status(
        atelet: Atelet, counter_image: str) -> None:  # noqa: F811
    run = await run_counter(atelet, "microvm-0")
    await check_commands(atelet, run.worker_ip, exec_request)
    missing = await atelet.stub.Exec(exec_request("no-such-program"))
    assert missing.exit_code == 127 and b"no-such-program" in missing.stderr, missing  # named by env

    started = time.monotonic()
    slow = await asyncio.wait_for(atelet.stub.Exec(exec_request("sh", "-c", "echo begun; sleep 300", timeout=2)), 60)
    assert (slow.ended, slow.exit_code) == ("timeout", -1), slow
    assert time.monotonic() - started < 30
    left = await atelet.stub.Exec(exec_request("ps"))
    assert b"sleep 300" not in left.stdout, left.stdout  # killed in the guest, not only given up on
    assert (await get(run.worker_ip))["file_count"] == 4  # the counter went on meanwhile

    await atelet.stub.Freeze(pb.FreezeRequest(operation_id=op(), worker="microvm-0", actor=ACTOR))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await atelet.stub.Exec(exec_request("true"))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "frozen" in (refused.value.details() or "")
    await atelet.stub.Terminate(pb.TerminateRequest(operation_id=op(), worker="microvm-0", actor=ACTOR))
