"""The microvm row of `bench activation`: the counter as a microvm template
(examples/counter/template-microvm.yaml) on the stack's microvm worker, against a raw QEMU
restore of the same snapshot in the same run, labelled with the accelerator that ran it.

Per cycle: suspend the actor through the API (a FULL snapshot: device state, RAM file, disk),
then the floor: QEMU started by hand on the actor's latest snapshot (``qemu.Vm.restore``: a copy
of the RAM file and the disk, the device state loaded, the guest continued) in the actor's own
worker's network namespace and tap, which are idle while the actor is suspended, so the guest
answers on the address it was saved with, then the first ``GET /`` and the VM stopped; then,
0.3 s later, ours: one ``GET /`` through the router, which resumes the actor (placement, the
atelet's digest check of every snapshot file, the same restore, the probe, the commit). Both
read the same snapshot files; the floor skips the digest check and the control plane.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import stack as stack_mod
from bench.actors import call, setup, workflow_steps
from bench.common import ROOT, Log, ms, summary

ATESPACE, ACTOR = "benchvm", "v1"
TEMPLATE = ROOT / "examples" / "counter" / "template-microvm.yaml"


async def _get_until_ok(client: httpx.AsyncClient, url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """GET ``url`` until it answers (a restored guest's TCP stack may need a moment to answer)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return await client.get(url, headers=headers or {})
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.005)


class RawRestore:
    """QEMU restores of the actor's latest snapshot with no control plane (module doc)."""

    def __init__(self, stack: stack_mod.Stack, worker: dict[str, Any]) -> None:
        self.stack = stack
        self.worker = worker
        self.work = Path(tempfile.mkdtemp(prefix="ate-bench-vm-"))
        self.accelerator = ""

    def _latest_checkpoint(self) -> Path:
        owner = self.stack.data_dir / "snapshots" / ATESPACE / "actors" / ACTOR
        done = [d for d in owner.iterdir() if (d / "manifest.json").exists() and (d / "checkpoint").is_dir()]
        newest = max(done, key=lambda d: int(d.name.split("-", 1)[0]))
        return newest / "checkpoint"

    async def once(self) -> dict[str, float]:
        """One raw restore + first GET, timed; the VM is stopped afterwards."""
        from atelet.drivers.microvm.network import TAP
        from atelet.drivers.microvm.qemu import Vm, VmConfig, read_state
        from atelet.settings import AteletSettings

        checkpoint = self._latest_checkpoint()
        state = read_state(checkpoint)
        self.accelerator = state.accelerator
        # the one the actor's VMs used: the newest in the atelet's cache (the stack is this run's own)
        initramfs = max((self.stack.data_dir / "atelet" / "microvm-initramfs").glob("*.cpio"),
                        key=lambda path: path.stat().st_mtime)  # fmt: skip
        kernel = AteletSettings().guest_kernel_dir / "vmlinuz"
        netns = f"ate-{self.worker['node']}-{self.worker['name']}"
        workdir = self.work / "vm"
        shutil.rmtree(workdir, ignore_errors=True)
        config = VmConfig(kernel, initramfs, state.memory_mib, state.vcpus, state.accelerator, self.work / "console.log",
                          netns=netns, tap=TAP, disks=(self.work / "disk0.img",))  # fmt: skip
        async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
            start = time.monotonic()
            vm = await Vm.restore(config, workdir, checkpoint)
            try:
                restored = time.monotonic()
                response = await _get_until_ok(client, f"http://{self.worker['ip']}:8080/")
                response.raise_for_status()
                end = time.monotonic()
            finally:
                await vm.stop()
        return {"total": end - start, "restore": restored - start, "first_get": end - restored}

    def close(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)


async def run_row(stack: stack_mod.Stack, cycles: int, warmup: int, log: Log) -> dict[str, Any]:
    """The microvm actor's cycles (module doc): ours and the floor per cycle, interleaved; ours
    broken into bench.activation's steps."""
    from temporalio.client import Client

    from bench.activation import STEPS, step_row

    temporal = await Client.connect(stack.temporal_address)
    rows: list[dict[str, Any]] = []
    setup(stack.api_url, stack.token, ATESPACE, [ACTOR], TEMPLATE, name="counter-vm")
    api = httpx.AsyncClient(base_url=stack.api_url, headers=stack.headers, timeout=300)
    proxy = httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_keepalive_connections=0), trust_env=False)
    headers = {"ate-target-actor": f"{ATESPACE}/{ACTOR}"}
    ours: list[float] = []
    floor: list[dict[str, float]] = []
    suspend_s: list[float] = []
    raw: RawRestore | None = None
    last_count = None
    try:
        first = await _get_until_ok(proxy, stack.router_url + "/", headers)  # from the golden snapshot
        first.raise_for_status()
        actor = (await api.get(f"/v1/atespaces/{ATESPACE}/actors/{ACTOR}")).json()
        raw = RawRestore(stack, actor["worker"])
        for i in range(warmup + cycles):
            t = time.monotonic()
            await call(api, "suspend", ATESPACE, ACTOR)
            suspend_s.append(time.monotonic() - t)
            if i >= warmup:
                floor.append(await raw.once())
            await asyncio.sleep(0.3)
            t_send = time.time()
            response = await proxy.get(stack.router_url + "/", headers=headers)
            t_recv = time.time()
            took = t_recv - t_send
            if response.status_code != 200:
                raise RuntimeError(f"microvm cycle {i}: router answered {response.status_code}: {response.text[:300]}")
            count = response.json()["memory_count"]
            if last_count is not None and count != last_count + 1:
                raise RuntimeError(f"microvm cycle {i}: memory_count {count} after {last_count}: memory not restored")
            last_count = count
            if i >= warmup:
                ours.append(took)
                await temporal.get_workflow_handle(f"actor/{ATESPACE}/{ACTOR}").result()
                rows.append(step_row(await workflow_steps(temporal, f"actor/{ATESPACE}/{ACTOR}"), t_send, t_recv))
                log(f"activation microvm: {i - warmup + 1}/{cycles} cycles, ours {ms(took):.0f} ms, "
                    f"floor {ms(floor[-1]['total']):.0f} ms")  # fmt: skip
    finally:
        await api.aclose()
        await proxy.aclose()
        if raw is not None:
            raw.close()
    return {
        "accelerator": raw.accelerator if raw else "",
        "ours": summary(ours),
        "floor": summary([f["total"] for f in floor]),
        "floor_detail": {k: summary([f[k] for f in floor]) for k in ("restore", "first_get")},
        "steps": {k: summary([r[k] for r in rows]) for k in STEPS},
        "suspend": summary(suspend_s[warmup:]),
        "raw": {"ours": ours, "floor": floor},
    }
