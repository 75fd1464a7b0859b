"""`python -m bench microvm`: the microvm class's VM-level figures, on real QEMU.

The example counter image in a VM (atelet/drivers/microvm: its rootfs in the initramfs, its
/data on a disk image, the worker's address on a tap), one cycle after another: a restore from a
FULL checkpoint plus the first GET, against the baseline measured in the same run, a cold boot
plus the first GET (what a DATA resume costs). Also the checkpoint itself, and what the restore's
copy of the RAM file costs (this filesystem has no reflinks: ``cp --reflink=auto`` copies; where
it has them, the copy is a clone). Labelled with the accelerator (here TCG: nested KVM runs no
guest, MICROVM.md; the figures say nothing of KVM). The end-to-end row, through the control
plane against a raw QEMU restore, is `bench activation`'s microvm row (bench/activation_microvm.py).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from atelet import netns
from atelet.drivers.microvm.disk import DISK_MODULES, build_disk
from atelet.drivers.microvm.initramfs import (
    NETWORK_MODULES,
    GuestImage,
    build_initramfs,
    command_for,
    with_dependencies,
)
from atelet.drivers.microvm.network import bridge_tap, guest_cmdline, mac_for
from atelet.drivers.microvm.qemu import RAM_FILE, Vm, VmConfig, copy_ram
from atelet.images import ImageStore
from bench.common import RESULTS, ROOT, ms, summary, table

ACCELERATOR = "tcg"


async def _first_get(url: str, seconds: float = 120.0) -> None:
    async with asyncio.timeout(seconds), httpx.AsyncClient(timeout=5, trust_env=False) as client:
        while True:
            try:
                if (await client.get(url)).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.005)


async def _run(cycles: int, log: Callable[[str], None]) -> dict[str, list[float]]:
    kernel_dir = Path(subprocess.run(["bash", str(ROOT / "scripts/guest-kernel.sh")], capture_output=True,
                                     text=True, check=True).stdout.strip().splitlines()[-1])  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="ate-bench-microvm-"))
    net = netns.plan("bench-microvm", "w0", 0, "10.202.7.0/24")
    await netns.create(net)
    figures: dict[str, list[float]] = {"boot": [], "restore": [], "checkpoint": [], "ram_copy": [], "ram_mb": []}
    try:
        image = await ImageStore([ROOT], work / "images").unpack("oci:examples/counter/oci:latest")
        env = [*image.config["process"].get("env", []), "DATA_DIR=/data", "PORT=8080"]
        modules = with_dependencies(next((kernel_dir / "lib/modules").iterdir()), (*NETWORK_MODULES, *DISK_MODULES))
        guest = GuestImage(command_for(["/counter"], env, "/", image.rootfs), modules=modules, rootfs=image.rootfs)
        initramfs = build_initramfs(guest, work / "initramfs.cpio")
        durable = work / "durable"
        durable.mkdir()
        disk = build_disk(durable, work / "data.img", 16)
        cfg = VmConfig(kernel_dir / "vmlinuz", initramfs, 256, 1, ACCELERATOR, work / "console.log",
                       f"{guest_cmdline(net)} ate.mount=vda:/data", netns=net.netns, tap=await bridge_tap(net),
                       mac=mac_for(net), disks=(disk,))  # fmt: skip
        url = f"http://{net.worker_ip}:8080/"
        for cycle in range(cycles):
            started = time.monotonic()
            vm = await Vm.boot(cfg, work / f"boot{cycle}")
            await _first_get(url)
            figures["boot"].append(time.monotonic() - started)
            started = time.monotonic()
            snapshot = work / f"snap{cycle}"
            await vm.checkpoint(snapshot)
            figures["checkpoint"].append(time.monotonic() - started)
            ram = snapshot / RAM_FILE
            figures["ram_mb"].append(int(subprocess.run(["du", "-k", str(ram)], capture_output=True, text=True,
                                                        check=True).stdout.split()[0]) / 1024)  # fmt: skip
            started = time.monotonic()
            copy_ram(ram, work / "copy-probe")
            figures["ram_copy"].append(time.monotonic() - started)
            (work / "copy-probe").unlink()
            started = time.monotonic()
            restored = await Vm.restore(cfg, work / f"restore{cycle}", snapshot)
            await _first_get(url)
            figures["restore"].append(time.monotonic() - started)
            await restored.stop()
            shutil.rmtree(snapshot)
            log(f"microvm: cycle {cycle + 1}/{cycles}: boot {ms(figures['boot'][-1]):.0f} ms, "
                f"restore {ms(figures['restore'][-1]):.0f} ms")  # fmt: skip
    finally:
        await netns.destroy(net)
        shutil.rmtree(work, ignore_errors=True)
    return figures


def run(cycles: int, log: Callable[[str], None]) -> None:
    """Run ``cycles`` boot/checkpoint/restore cycles and print the table and the KEY line."""
    figures = asyncio.run(_run(cycles, log))
    s = {name: summary(values) for name, values in figures.items() if name != "ram_mb"}
    rows = [
        ["restore (FULL) + first GET", *(ms(s["restore"][k]) for k in ("p50", "p95", "max"))],
        ["baseline: cold boot + first GET", *(ms(s["boot"][k]) for k in ("p50", "p95", "max"))],
        ["checkpoint (device state, RAM file kept)", *(ms(s["checkpoint"][k]) for k in ("p50", "p95", "max"))],
        ["copy of the RAM file (no reflinks here)", *(ms(s["ram_copy"][k]) for k in ("p50", "p95", "max"))],
    ]
    ram_mb = summary(figures["ram_mb"])["p50"]
    ratio = s["restore"]["p95"] / s["boot"]["p95"]
    print(f"microvm, {cycles} cycles, accelerator {ACCELERATOR} (software emulation), counter image, 256 MiB "
          f"guest, {ram_mb:.0f} MB of RAM file in use (ms)")  # fmt: skip
    print(table(["path", "p50", "p95", "max"], rows))
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"microvm-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"cycles": cycles, "accelerator": ACCELERATOR, "raw": figures}, indent=1))
    print(f"results: {path}")
    print(
        f"KEY microvm {ACCELERATOR} p50/p95 ms: restore {ms(s['restore']['p50']):.0f}/{ms(s['restore']['p95']):.0f} "
        f"boot {ms(s['boot']['p50']):.0f}/{ms(s['boot']['p95']):.0f} ratio {ratio:.2f} "
        f"checkpoint {ms(s['checkpoint']['p50']):.0f} ram-copy {ms(s['ram_copy']['p50']):.0f}"
    )
