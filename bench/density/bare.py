"""The density run's baseline: one bare counter sandbox, no control plane.

Restored with `runsc restore` from the template's golden checkpoint (the one ours were restored
from) into a namespace, bundle and runsc root of its own (`bench.activation.prepare_floor`),
under a node name and subnet apart from the stack's.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx

from bench import stack as stack_mod
from bench.density.database import golden

BARE_NODE, BARE_SUBNET = "atebench-density", "10.96.1.0/30"


class Bare:
    """One counter sandbox restored with `runsc restore` from the golden checkpoint, no control plane."""

    def __init__(self, stack: stack_mod.Stack) -> None:
        self.stack = stack
        self.floor: Any = None

    async def start(self) -> dict[str, float]:
        """Prepare namespace + bundle, restore, wait until `/readyz` answers, then one `GET /`."""
        from activities.atelet_wire import workload_spec
        from atelet import netns, probe
        from atelet.snapshots import CHECKPOINT_DIR, SnapshotStore
        from bench.activation import prepare_floor
        from domain.templates import ActorTemplateSpec

        uri, spec = await golden(self.stack.dsn)
        wspec = workload_spec(ActorTemplateSpec.from_document(spec))
        dest = SnapshotStore([self.stack.data_dir / "snapshots"]).resolve(uri)
        self.floor = f = await prepare_floor(
            self.stack, wspec, dest, node=BARE_NODE, subnet=BARE_SUBNET, hostname="bare"
        )
        await netns.ensure(f.net)
        t0 = time.monotonic()
        await f.runsc.restore("density-bare", f.bundle, dest / CHECKPOINT_DIR, f.work / "bare.log")
        t1 = time.monotonic()
        while await probe.http_status(f.net.worker_ip, f.port, "/readyz") != 200:
            await asyncio.sleep(0.005)
        t2 = time.monotonic()
        async with httpx.AsyncClient(timeout=30) as client:
            r = await client.get(f"http://{f.net.worker_ip}:{f.port}/")
            r.raise_for_status()
        return {"restore_s": t1 - t0, "ready_s": t2 - t1}

    @property
    def root(self) -> Path:
        """Its runsc root."""
        return Path(self.floor.runsc.root)

    async def close(self) -> None:
        """Delete the sandbox, the namespace and the work dir."""
        if self.floor is not None:
            await self.floor.close()
