"""The atelet's Freeze and Thaw calls (the hot tier): stop an actor's sandbox in place, and let it
run again. `AteletActivities` exposes them as the `atelet_freeze` activity and as the thaw inside
`place_and_restore` (a resume of a FROZEN actor).

Both calls are idempotent on the atelet (freezing a frozen sandbox, or thawing a running one,
changes nothing and says so), so Temporal may retry them after any crash.
"""

from __future__ import annotations

from typing import Any

from activities.atelet_channels import AteletChannels
from activities.atelet_wire import actor_ref, call_id
from atelet.proto import atelet_pb2 as pb
from domain.operations.freeze import AteletFreezeInput, AteletFreezeResult

FREEZE_CALL_SECONDS = 30.0
"""The deadline of a Freeze or Thaw call: the kernel freezes a sandbox in milliseconds; an atelet
that takes longer is stuck (the call fails, and is retried)."""


async def freeze(channels: AteletChannels, request: AteletFreezeInput) -> AteletFreezeResult:
    """Stop the holder's sandbox on its worker in place (it keeps its memory, uses no CPU).

    Returns:
        `changed` False when it was frozen already; the kernel's (or QEMU's) seconds; the method.

    Raises:
        AteletCallFailed: the atelet refused or could not be reached (see `activities.errors`).
    """
    call = pb.FreezeRequest(**_fields(request, "freeze"))
    done = await channels.call(
        request.worker.atelet_address, request.worker.node, "Freeze",
        lambda stub: stub.Freeze(call, timeout=FREEZE_CALL_SECONDS),
    )  # fmt: skip
    return AteletFreezeResult(changed=not done.already_frozen, seconds=done.freeze_seconds, method=done.method)


async def thaw(channels: AteletChannels, request: AteletFreezeInput) -> AteletFreezeResult:
    """Let the holder's frozen sandbox run again.

    Returns:
        `changed` False when it was running already; the kernel's (or QEMU's) seconds; the method.

    Raises:
        AteletCallFailed: the atelet refused or could not be reached (see `activities.errors`).
    """
    call = pb.ThawRequest(**_fields(request, "thaw"))
    done = await channels.call(
        request.worker.atelet_address, request.worker.node, "Thaw", lambda stub: stub.Thaw(call, timeout=FREEZE_CALL_SECONDS)
    )
    return AteletFreezeResult(changed=done.was_frozen, seconds=done.thaw_seconds, method=done.method)


def _fields(request: AteletFreezeInput, verb: str) -> dict[str, Any]:
    """The fields FreezeRequest and ThawRequest share: the call's ID, the worker, the actor."""
    return {
        "operation_id": call_id(request.operation_id, verb),
        "worker": request.worker.name,
        "actor": actor_ref(request.holder),
    }
