"""Keeping a microvm sandbox's durable dirs current: once its VM is stopped or frozen, each disk
is read back into its durable dir (``disk.extract_disk``, from a copy, so a VM that is thawed
keeps its disk untouched). The node's snapshot code then archives the dirs as for any sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import time
from pathlib import Path

from atelet.drivers.microvm import disk
from atelet.drivers.microvm.sandbox_record import SandboxRecord
from atelet.drivers.microvm.vm_config import VmError
from atelet.drivers.microvm.vm_snapshot import copy_ram
from atelet.errors import internal

log = logging.getLogger(__name__)


async def read_back(sandbox: SandboxRecord, *, final: bool) -> None:
    """Each disk into its durable dir, from a copy (the VM is stopped or frozen). ``final``:
    the VM will not run again, so later calls do nothing. It runs to its end even when the
    caller is cancelled (an exit watch cancelled by a stop): a cancelled read-back would
    leave a half-replaced dir. When a final one fails, the disk is moved next to its
    durable dir (named in the error) rather than left where the worker's next sandbox would
    overwrite it.

    Raises:
        AteletError: INTERNAL naming the durable dir and where its disk was kept.
    """
    await asyncio.shield(_read_back_locked(sandbox, final))


async def _read_back_locked(sandbox: SandboxRecord, final: bool) -> None:
    async with sandbox.lock:
        if sandbox.read_back:
            return
        for image, target in zip(sandbox.config.disks, sandbox.volumes, strict=True):
            if not image.exists():
                continue
            try:
                scratch = Path(await asyncio.to_thread(tempfile.mkdtemp, dir=image.parent, prefix=".read-back-"))
                try:
                    await asyncio.to_thread(copy_ram, image, scratch / image.name)
                    await asyncio.to_thread(disk.extract_disk, scratch / image.name, target)
                finally:
                    await asyncio.to_thread(shutil.rmtree, scratch, True)
            except (disk.DiskError, VmError, OSError) as error:
                kept = ""
                if final:
                    with contextlib.suppress(OSError):
                        target.parent.mkdir(parents=True, exist_ok=True)
                        destination = target.parent / f".{target.name}.unread-{int(time.time())}.img"
                        await asyncio.to_thread(shutil.move, str(image), str(destination))
                        kept = f"; its disk is kept at {destination}"
                log.error("durable dir %s could not be read back from its disk %s: %s%s", target, image, error, kept)
                raise internal(f"durable dir {target.name} could not be read back from its disk: {error}{kept}") from None
        sandbox.read_back = final
        if final:
            sandbox.save()
