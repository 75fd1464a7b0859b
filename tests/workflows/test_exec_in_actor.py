"""ExecInActor (workflows/exec_in_actor.py): the exec is recorded with who ran what, runs once on
the actor's worker, and its outcome goes to the history: `exit N`, what ended it, or `failed`
with the atelet's reason; an atelet that could not be reached is never asked twice (an exec is
not idempotent); a refused begin runs nothing."""

from __future__ import annotations

import grpc

from domain.operations.exec import AteletExecInput, BeginExecInput, ExecInput, ExecResult, FinishExecInput
from store.errors import FailedPrecondition
from tests.workflows.fakes import atelet_failure, store_failure
from tests.workflows.harness import Ate
from tests.workflows.samples import C1, worker
from workflows.exec_in_actor import ExecInActorWorkflow

ID = "exec/demo/c1/0123456789abcdef"
REQUEST = ExecInput(actor=C1, command=["cat", "/data/count.txt"], timeout_seconds=60, requested_by="alice")


def result(code: int = 0, ended: str = "") -> ExecResult:
    return ExecResult(exit_code=code, stdout="2\n", stderr="", stdout_truncated=False, stderr_truncated=False,
                      ended=ended, seconds=0.2, worker="default/w-1")  # fmt: skip


async def test_an_exec_is_recorded_runs_once_and_finishes_with_its_exit_status(ate: Ate) -> None:
    ate.fakes.script("begin_exec", worker(1)).script("atelet_exec", result(3)).script("finish_exec", None)
    done = await ate.execute(ExecInActorWorkflow.run, REQUEST, id=ID)
    op = ate.run_id
    assert ate.fakes.names() == ["begin_exec", "atelet_exec", "finish_exec"]
    assert ate.fakes.inputs("begin_exec") == [BeginExecInput(C1, op, "by alice: cat /data/count.txt")]
    assert ate.fakes.inputs("atelet_exec") == [AteletExecInput(op, worker(1), C1, ["cat", "/data/count.txt"], 60)]
    assert ate.fakes.inputs("finish_exec") == [FinishExecInput(op, "exit 3")]
    assert (done.exit_code, done.stdout) == (3, "2\n")


async def test_an_exec_a_suspend_ended_says_so_in_the_history(ate: Ate) -> None:
    ate.fakes.script("begin_exec", worker(1)).script("atelet_exec", result(-1, "suspended")).script("finish_exec", None)
    done = await ate.execute(ExecInActorWorkflow.run, REQUEST, id=ID)
    assert ate.fakes.inputs("finish_exec") == [FinishExecInput(ate.run_id, "suspended")]
    assert done.ended == "suspended"


async def test_an_unreachable_atelet_is_asked_once_and_the_failure_recorded(ate: Ate) -> None:
    ate.fakes.script("begin_exec", worker(1)).script("finish_exec", None)
    ate.fakes.script("atelet_exec", atelet_failure(grpc.StatusCode.UNAVAILABLE, "connection refused", "Exec",
                                                   unreachable=True))  # fmt: skip
    failure = await ate.failure(ExecInActorWorkflow.run, REQUEST, id=ID)
    assert ate.fakes.names() == ["begin_exec", "atelet_exec", "finish_exec"]  # one attempt, not four
    [finished] = ate.fakes.inputs("finish_exec")
    assert finished.outcome == "failed" and "connection refused" in (finished.error or ""), finished
    assert "connection refused" in failure.message


async def test_a_refused_begin_runs_nothing(ate: Ate) -> None:
    ate.fakes.script("begin_exec", store_failure(FailedPrecondition("actor demo/c1 is SUSPENDED: exec runs ...")))
    failure = await ate.failure(ExecInActorWorkflow.run, REQUEST, id=ID)
    assert ate.fakes.names() == ["begin_exec"]
    assert "is SUSPENDED" in failure.message
