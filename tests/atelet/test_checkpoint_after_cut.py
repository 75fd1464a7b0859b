"""A FULL snapshot taken right after the router cut a request off (a drain at its timeout, a client
gone) while the workload still works on it restores to a sandbox that answers (real runsc, real
gRPC), when the router resets the connection, as it does (router/upstream_client.py).

Closed half-way instead (a FIN, the connection half-open in the sandbox), 3 of 3 restores here
(runsc 20240729) gave a counter whose listener answered no connection: the wakeup probe ran out
(`got no answer in 20 s (last: no connection)`), and every later resume of that snapshot failed
the same way."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from atelet.proto import atelet_pb2 as pb
from tests.atelet.conftest import Atelet, counter_spec
from tests.atelet.test_roundtrip import ACTOR, get, op

pytestmark = [pytest.mark.runsc, pytest.mark.asyncio]


def open_slow_request(ip: str) -> socket.socket:
    """A request the counter answers only after 15 s (its /slow), sent and left waiting."""
    sock = socket.create_connection((ip, 8080), timeout=5)
    sock.sendall(b"GET /slow?ms=15000 HTTP/1.1\r\nhost: c1\r\n\r\n")
    return sock


async def test_a_full_snapshot_taken_after_a_reset_request_restores(atelet: Atelet, counter_image: str) -> None:
    spec = counter_spec(counter_image)
    run = await atelet.stub.Run(pb.RunRequest(operation_id=op(), worker="default-0", actor=ACTOR, spec=spec,
                                              probe_timeout_seconds=20))
    assert (await get(run.worker_ip))["memory_count"] == 1
    sock = open_slow_request(run.worker_ip)
    await asyncio.sleep(0.5)  # the workload is inside the request
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # as the router cuts it
    sock.close()
    await asyncio.sleep(0.1)
    uri = f"file://{atelet.snapshot_root}/demo/c1/1"
    ckpt = await atelet.stub.Checkpoint(pb.CheckpointRequest(operation_id=op(), worker="default-0", actor=ACTOR,
                                                             scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri))
    restored = await atelet.stub.Restore(pb.RestoreRequest(
        operation_id=op(), worker="default-1", actor=ACTOR, spec=spec, snapshot_uri=uri, manifest=ckpt.manifest,
        probe_timeout_seconds=20,
    ))  # fmt: skip
    assert (await get(restored.worker_ip))["memory_count"] == 2
    await atelet.stub.Terminate(pb.TerminateRequest(operation_id=op(), worker="default-1", actor=ACTOR))
