"""Exec (issue 29) on real runsc: a command runs inside a RUNNING counter's sandbox and answers
its exit status and output; a long one is ended by its timeout, or by a checkpoint, which then
saves a sandbox without it (the restore answers with the counter's memory, and the exec'd
process is not in it); refusals change nothing.

The expected values are the counter's own (its `count.txt` holds the number of requests it
served, examples/counter/main.go) and busybox's (`sh -c 'exit 3'` exits 3; `kill -9 $$` ends with
128 + 9)."""

from __future__ import annotations

import asyncio
import email.utils
import time
import uuid
from collections.abc import Callable

import grpc
import httpx
import pytest

from atelet.proto import atelet_pb2 as pb
from tests.atelet.conftest import Atelet, counter_spec

pytestmark = [pytest.mark.runsc, pytest.mark.asyncio]
ACTOR = pb.ActorRef(atespace="demo", name="x1")


def op() -> str:
    return f"op-{uuid.uuid4().hex[:12]}"


async def get(ip: str) -> dict:
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.get(f"http://{ip}:8080/", headers={"Connection": "close"})
        response.raise_for_status()
        return response.json()


def exec_request(*command: str, worker: str = "default-0", timeout: float = 0, limit: int = 0) -> pb.ExecRequest:
    return pb.ExecRequest(operation_id=op(), worker=worker, actor=ACTOR, command=list(command),
                          timeout_seconds=timeout, max_output_bytes=limit)  # fmt: skip


async def check_commands(atelet: Atelet, worker_ip: str, request: Callable[..., pb.ExecRequest]) -> None:
    """After 3 requests to the counter at ``worker_ip``: output, exit statuses (by itself, by a
    signal), the workload's process seen next to the exec, and output cut at the limit (the
    checks both sandbox classes share)."""
    assert [(await get(worker_ip))["file_count"] for _ in range(3)] == [1, 2, 3]
    done = await atelet.stub.Exec(request("cat", "/data/count.txt"))
    assert (done.exit_code, done.stdout, done.stderr, done.ended) == (0, b"3\n", b"", ""), done
    failed = await atelet.stub.Exec(request("sh", "-c", "echo out; echo err >&2; exit 3"))
    assert (failed.exit_code, failed.stdout, failed.stderr) == (3, b"out\n", b"err\n"), failed
    signalled = await atelet.stub.Exec(request("sh", "-c", "kill -9 $$"))
    assert signalled.exit_code == 128 + 9, signalled
    # The exec'd process sees the workload's own processes (it runs in the same sandbox).
    ps = await atelet.stub.Exec(request("ps"))
    assert b"/counter" in ps.stdout, ps
    # Output beyond the limit is cut, and says so.
    big = await atelet.stub.Exec(request("sh", "-c", "head -c 5000 /counter", limit=1000))
    assert (len(big.stdout), big.stdout_truncated, big.stderr_truncated) == (1000, True, False), big


async def run_counter(a: Atelet, worker: str, image: str) -> pb.RunResponse:
    return await a.stub.Run(pb.RunRequest(operation_id=op(), worker=worker, actor=ACTOR,
                                          spec=counter_spec(image), probe_timeout_seconds=20))  # fmt: skip


async def test_a_command_runs_in_the_sandbox_with_its_output_and_exit_status(atelet: Atelet, counter_image: str) -> None:
    run = await run_counter(atelet, "default-0", counter_image)
    await check_commands(atelet, run.worker_ip, exec_request)
    # A program the image does not have: runsc's error, a failed exit status.
    missing = await atelet.stub.Exec(exec_request("no-such-program"))
    assert missing.exit_code != 0 and missing.ended == "", missing
    # The workload went on meanwhile: its count is untouched by the execs.
    assert (await get(run.worker_ip))["file_count"] == 4
    await atelet.stub.Terminate(pb.TerminateRequest(operation_id=op(), worker="default-0", actor=ACTOR))


async def test_an_exec_past_its_timeout_is_killed_and_says_so(atelet: Atelet, counter_image: str) -> None:
    await run_counter(atelet, "default-0", counter_image)
    started = time.monotonic()
    done = await asyncio.wait_for(atelet.stub.Exec(exec_request("sh", "-c", "echo begun; sleep 30", timeout=1.5)), 20)
    assert (done.ended, done.exit_code, done.stdout) == ("timeout", -1, b"begun\n"), done
    assert time.monotonic() - started < 15
    left = await atelet.stub.Exec(exec_request("ps"))
    assert b"sleep 30" not in left.stdout, left.stdout  # the killed command is gone from the sandbox
    await atelet.stub.Terminate(pb.TerminateRequest(operation_id=op(), worker="default-0", actor=ACTOR))


async def test_a_checkpoint_ends_an_exec_and_saves_the_sandbox_without_it(atelet: Atelet, counter_image: str) -> None:
    run = await run_counter(atelet, "default-0", counter_image)
    assert [(await get(run.worker_ip))["memory_count"] for _ in range(2)] == [1, 2]
    long_exec = asyncio.ensure_future(atelet.stub.Exec(exec_request("sh", "-c", "echo begun; sleep 300", timeout=600)))
    await asyncio.sleep(1.5)  # the exec has begun
    uri = f"file://{atelet.snapshot_root}/demo/x1/1"
    saved = await asyncio.wait_for(atelet.stub.Checkpoint(pb.CheckpointRequest(
        operation_id=op(), worker="default-0", actor=ACTOR, scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri)), 90)
    ended = await asyncio.wait_for(long_exec, 30)
    assert (ended.ended, ended.stdout) == ("suspended", b"begun\n"), ended
    await asyncio.sleep(3)  # suspended a while: the restored sandbox's wall clock must be the host's, not 3 s behind
    restored = await atelet.stub.Restore(pb.RestoreRequest(
        operation_id=op(), worker="default-1", actor=ACTOR, spec=counter_spec(counter_image), snapshot_uri=uri,
        manifest=saved.manifest, probe_timeout_seconds=20))
    assert (await get(restored.worker_ip))["memory_count"] == 3
    after = await atelet.stub.Exec(exec_request("ps", worker="default-1"))
    assert after.exit_code == 0 and b"sleep 300" not in after.stdout, after.stdout
    # the counter's HTTP Date header is its sandbox's wall clock (Go's net/http, to the second)
    async with httpx.AsyncClient(timeout=5) as client:
        answer = await client.get(f"http://{restored.worker_ip}:8080/", headers={"Connection": "close"})
    sandbox_time = email.utils.parsedate_to_datetime(answer.headers["date"]).timestamp()
    assert abs(sandbox_time - time.time()) <= 2, (answer.headers["date"], time.time())  # 1 s of it: the header's rounding
    await atelet.stub.Terminate(pb.TerminateRequest(operation_id=op(), worker="default-1", actor=ACTOR))


async def test_exec_is_refused_where_no_running_actor_is_and_for_an_empty_command(
    atelet: Atelet, counter_image: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as idle:
        await atelet.stub.Exec(exec_request("cat", "/data/count.txt"))
    assert idle.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "exec needs the actor RUNNING" in (idle.value.details() or "")
    await run_counter(atelet, "default-0", counter_image)
    with pytest.raises(grpc.aio.AioRpcError) as empty:
        await atelet.stub.Exec(exec_request())
    assert empty.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "command" in (empty.value.details() or "")
    await atelet.stub.Freeze(pb.FreezeRequest(operation_id=op(), worker="default-0", actor=ACTOR))
    with pytest.raises(grpc.aio.AioRpcError) as frozen:
        await atelet.stub.Exec(exec_request("ps"))
    assert frozen.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "frozen" in (frozen.value.details() or "")
    await atelet.stub.Thaw(pb.ThawRequest(operation_id=op(), worker="default-0", actor=ACTOR))
    assert (await atelet.stub.Exec(exec_request("true"))).exit_code == 0
    await atelet.stub.Terminate(pb.TerminateRequest(operation_id=op(), worker="default-0", actor=ACTOR))
