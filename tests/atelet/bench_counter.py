"""Times the counter on a real atelet: cold run-to-ready, checkpoint, restore-to-first-reply.

Run as root from the repo root: ``.venv/bin/python -m tests.atelet.bench_counter [rounds]``.
Each round: Run on worker 0 (timed until the probe passed), one GET, FULL Checkpoint (timed),
Restore on worker 1 (timed until the first GET / answered), Terminate. Prints medians.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from atelet.proto import atelet_pb2 as pb
from tests.atelet.conftest import COUNTER_IMAGE, counter_spec, force_cleanup, make_settings, running_atelet


async def bench(rounds: int) -> None:
    base = Path(tempfile.mkdtemp(prefix="ate-b-", dir="/tmp"))
    settings = make_settings(base)
    results: dict[str, list[float]] = {"run_to_ready": [], "checkpoint": [], "restore_to_first_reply": [],
                                       "snapshot_mb": []}
    try:
        async with running_atelet(settings) as a, httpx.AsyncClient(timeout=5) as client:
            for i in range(rounds):
                actor = pb.ActorRef(atespace="bench", name=f"c{i}")
                t = time.monotonic()
                run = await a.stub.Run(pb.RunRequest(operation_id=uuid.uuid4().hex, worker="default-0", actor=actor,
                                                     spec=counter_spec(COUNTER_IMAGE), probe_timeout_seconds=20))
                results["run_to_ready"].append(time.monotonic() - t)
                await client.get(f"http://{run.worker_ip}:8080/", headers={"Connection": "close"})
                uri = f"file://{a.snapshot_root}/bench/c{i}/1"
                t = time.monotonic()
                ckpt = await a.stub.Checkpoint(pb.CheckpointRequest(
                    operation_id=uuid.uuid4().hex, worker="default-0", actor=actor,
                    scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri))
                results["checkpoint"].append(time.monotonic() - t)
                results["snapshot_mb"].append(ckpt.size_bytes / 1e6)
                t = time.monotonic()
                restored = await a.stub.Restore(pb.RestoreRequest(
                    operation_id=uuid.uuid4().hex, worker="default-1", actor=actor,
                    spec=counter_spec(COUNTER_IMAGE), snapshot_uri=uri, manifest=ckpt.manifest,
                    probe_timeout_seconds=20))
                reply = await client.get(f"http://{restored.worker_ip}:8080/", headers={"Connection": "close"})
                results["restore_to_first_reply"].append(time.monotonic() - t)
                assert reply.json()["memory_count"] == 2
                await a.stub.Terminate(pb.TerminateRequest(operation_id=uuid.uuid4().hex, worker="default-1",
                                                           actor=actor))
    finally:
        force_cleanup(settings)
        shutil.rmtree(base, ignore_errors=True)
    for name, values in results.items():
        print(f"{name:24s} median {statistics.median(values):.3f}  "
              f"min {min(values):.3f}  max {max(values):.3f}  (n={len(values)})")


if __name__ == "__main__":
    asyncio.run(bench(int(sys.argv[1]) if len(sys.argv) > 1 else 5))
