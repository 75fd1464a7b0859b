"""The control plane's gRPC channels to atelets, and one call through them.

`AteletChannels` keeps one mutual-TLS channel per node and address open and reuses it (made
again when the certificate files were renewed: `activities.atelet_tls`). `call` runs one RPC on
it, heartbeating the activity while it waits, and turns a failed status into `AteletCallFailed`,
telling an atelet that answered with an error from one that could not be reached at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
from temporalio import activity

from activities.atelet_tls import AteletClientTls, target_options
from activities.errors import AteletCallFailed
from atelet.proto import atelet_pb2_grpc as pb_grpc

M = TypeVar("M")

HEARTBEAT_SECONDS = 2.0
"""How often an activity waiting for an atelet call heartbeats (the workflows' heartbeat timeout
is a few times this)."""

RETIRED_CHANNEL_GRACE_SECONDS = 600.0
"""How long a channel replaced after a certificate renewal may finish its calls before it closes."""


def connect_failed(error: grpc.aio.AioRpcError, channel: grpc.aio.Channel) -> bool:
    """Whether a failed call reached no atelet at all: the channel could not connect.

    Decided from the channel's connectivity state, not from the error's text: a call fails with
    UNAVAILABLE both when the atelet answers UNAVAILABLE itself (the channel is READY) and when
    no connection could be made (refused, no route, a failed TLS handshake): the channel is then
    in TRANSIENT_FAILURE, and gRPC keeps it there until a connection succeeds (connectivity
    semantics: "sticky" TRANSIENT_FAILURE), so the state read right after the failure tells.

    Args:
        error: the call's error.
        channel: the channel the call ran on.
    """
    return (
        error.code() == grpc.StatusCode.UNAVAILABLE
        and channel.get_state(try_to_connect=False) == grpc.ChannelConnectivity.TRANSIENT_FAILURE
    )


class AteletChannels:
    """Open mutual-TLS channels to atelets, one per (node, address).

    Args:
        tls: the control plane's client certificate, key and CA.
    """

    def __init__(self, tls: AteletClientTls) -> None:
        self.tls = tls
        self._channels: dict[tuple[str, str], tuple[int, grpc.aio.Channel]] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()

    async def channel(self, address: str, node: str) -> grpc.aio.Channel:
        """The (cached) channel to node `node`'s atelet at `address`; it refuses any other node.

        Raises:
            AteletTlsError: the TLS files cannot be loaded (the first time).
        """
        credentials = self.tls.credentials()  # notices renewed files
        cached = self._channels.get((node, address))
        if cached is None or cached[0] != self.tls.generation:
            async with self._lock:
                cached = self._channels.get((node, address))
                if cached is None or cached[0] != self.tls.generation:
                    if cached is not None:
                        self._retire(cached[1])
                    channel = grpc.aio.secure_channel(address, credentials, options=target_options(node))
                    cached = (self.tls.generation, channel)
                    self._channels[(node, address)] = cached
        return cached[1]

    def _retire(self, channel: grpc.aio.Channel) -> None:
        """Closes a channel made with replaced credentials once its calls had time to finish."""
        task = asyncio.create_task(channel.close(grace=RETIRED_CHANNEL_GRACE_SECONDS))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def call(
        self, address: str, node: str, name: str, invoke: Callable[[pb_grpc.AteletStub], Awaitable[M]]
    ) -> M:
        """Run one RPC (`invoke` on the stub of node `node`'s atelet at `address`), heartbeating
        the activity while it runs (a restore or a checkpoint takes seconds; the heartbeat lets
        Temporal tell a slow call from a dead worker).

        Args:
            name: the RPC's name for messages, e.g. "Restore".

        Raises:
            AteletCallFailed: the atelet answered with a non-OK status, or could not be reached
                (`unreachable`).
            AteletTlsError: the TLS files cannot be loaded.
        """
        channel = await self.channel(address, node)
        task: asyncio.Future[M] = asyncio.ensure_future(invoke(pb_grpc.AteletStub(channel)))  # type: ignore[no-untyped-call]
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=HEARTBEAT_SECONDS)
                if done:
                    return task.result()
                if activity.in_activity():
                    activity.heartbeat()
        except grpc.aio.AioRpcError as error:
            raise AteletCallFailed(name, address, error, unreachable=connect_failed(error, channel)) from error
        finally:
            task.cancel()

    async def close(self) -> None:
        """Close every channel."""
        for _, channel in self._channels.values():
            await channel.close(grace=None)
        self._channels.clear()
        for task in list(self._closing):
            task.cancel()
