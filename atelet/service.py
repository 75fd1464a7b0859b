"""The gRPC servicer: translates proto requests into ``Node`` calls and ``AteletError`` into statuses."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

import grpc

from atelet.errors import AteletError
from atelet.node import Node
from atelet.proto import atelet_pb2 as pb
from atelet.proto import atelet_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)
T = TypeVar("T")
Context = grpc.aio.ServicerContext[Any, Any]


async def _call(context: Context, what: str, work: Awaitable[T]) -> T:
    try:
        return await work
    except AteletError as exc:
        log.info("%s failed: %s", what, exc)
        await context.abort(exc.code, exc.reason)
    except Exception as exc:  # every other error becomes INTERNAL with its text
        log.exception("%s failed", what)
        await context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
    raise AssertionError("unreachable")  # context.abort raises


class AteletService(pb_grpc.AteletServicer):
    """``ate.atelet.v1.Atelet`` backed by one ``Node``."""

    def __init__(self, node: Node) -> None:
        self.node = node

    async def Run(  # noqa: N802
        self, request: pb.RunRequest, context: Context
    ) -> pb.RunResponse:
        """Cold boot of an actor on a worker."""
        return await _call(context, f"Run {request.operation_id}", self.node.run(request))

    async def Restore(  # noqa: N802
        self, request: pb.RestoreRequest, context: Context
    ) -> pb.RestoreResponse:
        """Restores an actor from a snapshot onto a worker."""
        return await _call(context, f"Restore {request.operation_id}", self.node.restore(request))

    async def Checkpoint(  # noqa: N802
        self, request: pb.CheckpointRequest, context: Context
    ) -> pb.CheckpointResponse:
        """Checkpoints an actor into the snapshot store and frees its worker."""
        return await _call(context, f"Checkpoint {request.operation_id}", self.node.checkpoint(request))

    async def Terminate(  # noqa: N802
        self, request: pb.TerminateRequest, context: Context
    ) -> pb.TerminateResponse:
        """Stops and deletes an actor's sandbox on a worker, if any."""
        return await _call(context, f"Terminate {request.operation_id}", self.node.terminate(request))

    async def DeleteSnapshot(  # noqa: N802
        self, request: pb.DeleteSnapshotRequest, context: Context
    ) -> pb.DeleteSnapshotResponse:
        """Deletes a snapshot directory (idempotent)."""
        return await _call(context, f"DeleteSnapshot {request.operation_id}", self.node.delete_snapshot(request))

    async def CopySnapshot(  # noqa: N802
        self, request: pb.CopySnapshotRequest, context: Context
    ) -> pb.CopySnapshotResponse:
        """Copies a completed snapshot (typically a local one) to another URI (idempotent)."""
        return await _call(context, f"CopySnapshot {request.operation_id}", self.node.copy_snapshot(request))

    async def Freeze(  # noqa: N802
        self, request: pb.FreezeRequest, context: Context
    ) -> pb.FreezeResponse:
        """Freezes an actor's sandbox in place (no CPU, memory kept; idempotent)."""
        return await _call(context, f"Freeze {request.operation_id}", self.node.freeze(request))

    async def Thaw(  # noqa: N802
        self, request: pb.ThawRequest, context: Context
    ) -> pb.ThawResponse:
        """Lets a frozen sandbox run again (idempotent)."""
        return await _call(context, f"Thaw {request.operation_id}", self.node.thaw(request))

    async def Exec(  # noqa: N802
        self, request: pb.ExecRequest, context: Context
    ) -> pb.ExecResponse:
        """Runs a command in an actor's sandbox and answers its exit status and output."""
        return await _call(context, f"Exec {request.operation_id}", self.node.exec(request))

    async def Health(  # noqa: N802
        self, request: pb.HealthRequest, context: Context
    ) -> pb.HealthResponse:
        """The node, its runsc build and its workers."""
        return self.node.health()
