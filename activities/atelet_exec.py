"""The atelet's Exec call: a command in an actor's sandbox (ExecInActor). `AteletActivities`
exposes it as the `atelet_exec` activity, run once (an exec is not idempotent)."""

from __future__ import annotations

from activities.atelet_channels import AteletChannels
from activities.atelet_wire import actor_ref, call_id
from atelet.proto import atelet_pb2 as pb
from domain.operations.exec import EXEC_CALL_MARGIN_SECONDS, EXEC_OUTPUT_BYTES, AteletExecInput, ExecResult


async def exec_command(channels: AteletChannels, request: AteletExecInput) -> ExecResult:
    """Run the command in the holder's sandbox on its worker until it ends.

    Returns:
        Its exit status, output (UTF-8, undecodable bytes replaced), what ended it, its seconds.

    Raises:
        AteletCallFailed: the atelet refused or could not be reached (see `activities.errors`).
    """
    call = pb.ExecRequest(
        operation_id=call_id(request.operation_id, "exec"), worker=request.worker.name,
        actor=actor_ref(request.holder), command=request.command, timeout_seconds=request.timeout_seconds,
        max_output_bytes=EXEC_OUTPUT_BYTES,
    )  # fmt: skip
    done = await channels.call(
        request.worker.atelet_address, request.worker.node, "Exec",
        lambda stub: stub.Exec(call, timeout=request.timeout_seconds + EXEC_CALL_MARGIN_SECONDS),
    )  # fmt: skip
    return ExecResult(
        exit_code=done.exit_code, stdout=done.stdout.decode(errors="replace"),
        stderr=done.stderr.decode(errors="replace"), stdout_truncated=done.stdout_truncated,
        stderr_truncated=done.stderr_truncated, ended=done.ended, seconds=done.seconds,
        worker=f"{request.worker.pool}/{request.worker.name}",
    )  # fmt: skip
