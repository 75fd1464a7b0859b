"""Idempotency records survive a restart; concurrent repeats run the operation once."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import grpc
import pytest

from atelet.errors import AteletError
from atelet.oplog import OperationLog
from atelet.proto import atelet_pb2 as pb


@pytest.mark.asyncio
async def test_operation_runs_once_and_survives_restart(tmp_path: Path) -> None:
    calls = 0

    async def work() -> pb.TerminateResponse:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)
        return pb.TerminateResponse(was_running=True)

    log = OperationLog(tmp_path)
    results = await asyncio.gather(*(log.run("op-1", "terminate", pb.TerminateResponse, work) for _ in range(5)))
    assert calls == 1 and all(r.was_running for r in results)
    restarted = OperationLog(tmp_path)
    assert (await restarted.run("op-1", "terminate", pb.TerminateResponse, work)).was_running
    assert calls == 1
    with pytest.raises(AteletError) as err:
        await restarted.run("op-1", "run", pb.RunResponse, work)  # type: ignore[arg-type]
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.asyncio
async def test_failures_are_not_recorded(tmp_path: Path) -> None:
    attempts = 0

    async def flaky() -> pb.TerminateResponse:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise AteletError(grpc.StatusCode.UNAVAILABLE, "try again")
        return pb.TerminateResponse(was_running=False)

    log = OperationLog(tmp_path)
    with pytest.raises(AteletError):
        await log.run("op-2", "terminate", pb.TerminateResponse, flaky)
    assert not (await log.run("op-2", "terminate", pb.TerminateResponse, flaky)).was_running
    assert attempts == 2


@pytest.mark.asyncio
async def test_started_operations_are_marked_until_they_finish(tmp_path: Path) -> None:
    gate = asyncio.Event()

    async def work() -> pb.TerminateResponse:
        await gate.wait()
        return pb.TerminateResponse(was_running=True)

    log = OperationLog(tmp_path)
    task = asyncio.ensure_future(log.run("op-3", "terminate", pb.TerminateResponse, work))
    await asyncio.sleep(0.01)
    # What an atelet restarted now would see: started, not finished; a repeat runs it again.
    restarted = OperationLog(tmp_path)
    assert restarted.in_flight() == [("op-3", "terminate")]
    assert restarted.recorded("op-3", "terminate", pb.TerminateResponse) is None
    with pytest.raises(AteletError):
        restarted.recorded("op-3", "run", pb.RunResponse)  # still one kind per operation ID
    gate.set()
    assert (await task).was_running
    assert log.in_flight() == []

    async def failing() -> pb.TerminateResponse:
        raise AteletError(grpc.StatusCode.UNAVAILABLE, "no")

    with pytest.raises(AteletError):
        await log.run("op-4", "terminate", pb.TerminateResponse, failing)
    assert log.in_flight() == [] and len(list(tmp_path.glob("*.json"))) == 1


@pytest.mark.asyncio
async def test_records_of_calls_completed_long_ago_are_pruned_and_the_others_kept(tmp_path: Path) -> None:
    """A record older than the retention goes (a retry then runs the call again); a newer one,
    one of a call in flight and one that started and never finished (the atelet died) stay."""
    log = OperationLog(tmp_path)
    calls = 0

    async def work() -> pb.TerminateResponse:
        nonlocal calls
        calls += 1
        return pb.TerminateResponse(was_running=True)

    await log.run("op-old", "terminate", pb.TerminateResponse, work)
    await log.run("op-new", "terminate", pb.TerminateResponse, work)
    log._started("op-died", "checkpoint")  # what a killed atelet leaves
    release = asyncio.Event()

    async def slow() -> pb.TerminateResponse:
        await release.wait()
        return pb.TerminateResponse()

    running = asyncio.create_task(log.run("op-running", "terminate", pb.TerminateResponse, slow))
    await asyncio.sleep(0.05)
    old = log._path("op-old")
    record = json.loads(old.read_text())
    record["completed_at"] = time.time() - 8 * 86400  # completed 8 days ago
    old.write_text(json.dumps(record))
    assert log.prune(7 * 86400) == 1
    assert not old.exists() and log._path("op-new").exists() and log._path("op-died").exists()
    release.set()
    await running
    assert log._path("op-running").exists()
    await log.run("op-old", "terminate", pb.TerminateResponse, work)  # a late retry runs it again
    assert calls == 3
