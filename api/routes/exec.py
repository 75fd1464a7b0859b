"""`POST /v1/atespaces/{atespace}/actors/{name}/exec`: run a command inside a RUNNING actor's
sandbox (`ate exec`), for debugging, and answer its exit status and output once it ends.

Only `operator` and above (`actors.operate`); every exec is recorded in the actor's history with
who asked and what (`ate describe actor`), and runs as its own ExecInActor workflow (visible in
the Temporal UI). It does not hold the actor's lock: a suspend meanwhile is not kept waiting, its
checkpoint ends the command (`ended: suspended`).
"""

from __future__ import annotations

import uuid

from fastapi import APIRouter
from pydantic import BaseModel, Field

from api.access.guard import PrincipalDep, needs
from api.deps import StoreDep, TemporalDep
from api.errors import ApiError
from api.operations import search_attributes, wait_result
from api.strict import Strict
from domain.access import Permission
from domain.operations.exec import (
    DEFAULT_EXEC_TIMEOUT_SECONDS,
    EXEC_CALL_MARGIN_SECONDS,
    EXEC_OUTPUT_BYTES,
    EXEC_WORKFLOW,
    MAX_COMMAND_ARGUMENTS,
    MAX_COMMAND_BYTES,
    MAX_EXEC_TIMEOUT_SECONDS,
    ExecInput,
    ExecResult,
    exec_workflow_id,
    not_running,
)
from domain.reasons import Reason
from domain.refs import ActorRef
from domain.states import ActorState
from domain.temporal import TASK_QUEUE, WORKFLOW_TASK_TIMEOUT

router = APIRouter(tags=["actors"])


class ExecRequest(Strict):
    """POST body of an exec."""

    command: list[str] = Field(min_length=1, max_length=MAX_COMMAND_ARGUMENTS,
                               description="The program and its arguments (argv), e.g. [\"cat\", \"/data/count.txt\"].")
    timeout_seconds: float = Field(default=DEFAULT_EXEC_TIMEOUT_SECONDS, gt=0, le=MAX_EXEC_TIMEOUT_SECONDS,
                                   description="Seconds the command may run before it is killed.")  # fmt: skip


class ExecResponse(BaseModel):
    """What the command did."""

    exit_code: int = Field(description="Its exit status; 128 + N when signal N ended it; -1 when it could not be told.")
    stdout: str
    stderr: str
    stdout_truncated: bool = Field(description=f"stdout was longer than {EXEC_OUTPUT_BYTES} bytes and was cut.")
    stderr_truncated: bool
    ended: str = Field(description="'' when it exited by itself; else timeout, suspended (a checkpoint of the "
                                   "sandbox ended it) or stopped.")  # fmt: skip
    seconds: float
    worker: str = Field(description="The worker it ran on, <pool>/<name>.")


@router.post("/v1/atespaces/{atespace}/actors/{name}/exec", **needs(Permission.ACTORS_OPERATE))
async def exec_in_actor(
    atespace: str, name: str, body: ExecRequest, store: StoreDep, temporal: TemporalDep, principal: PrincipalDep
) -> ExecResponse:
    """Run `command` inside the RUNNING actor's sandbox and answer its exit status and output
    (each stream up to 256 KiB) once it ends, by itself or at `timeout_seconds`. Refused (409)
    unless the actor is RUNNING; nothing is changed by a refusal."""
    ref = ActorRef(atespace, name)
    if any(not part for part in body.command[:1]) or sum(len(part.encode()) for part in body.command) > MAX_COMMAND_BYTES:
        raise ApiError(f"command: give a program to run, with at most {MAX_COMMAND_BYTES} bytes of arguments in all",
                       {"field": "command"}, Reason.INVALID_ARGUMENT)  # fmt: skip
    actor = await store.actors.get(ref)
    if actor.state != ActorState.RUNNING:
        raise ApiError(not_running(ref, actor.state), {"state": actor.state}, Reason.FAILED_PRECONDITION)
    handle = await temporal.start_workflow(
        EXEC_WORKFLOW,
        ExecInput(actor=ref, command=body.command, timeout_seconds=body.timeout_seconds, requested_by=principal.name),
        id=exec_workflow_id(ref, uuid.uuid4().hex[:16]),
        task_queue=TASK_QUEUE,
        task_timeout=WORKFLOW_TASK_TIMEOUT,
        search_attributes=search_attributes(atespace, name, EXEC_WORKFLOW),
        result_type=ExecResult,
    )  # fmt: skip
    result = await wait_result(handle, body.timeout_seconds + 3 * EXEC_CALL_MARGIN_SECONDS, ref.key, "exec")
    return ExecResponse(**result.__dict__)
