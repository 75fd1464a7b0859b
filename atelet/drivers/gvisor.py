"""The driver of sandbox class ``gvisor``: ``SandboxDriver`` over runsc.

Composes the gVisor-specific modules: ``atelet.runsc`` (one coroutine per runsc verb),
``atelet.bundle`` (the OCI bundle of a sandbox, from the unpacked image of ``atelet.images``) and
``atelet.watch`` (``runsc wait`` plus a poll of the sandbox process, for exits). It also owns two
quirks of runsc with network namespaces: runsc strips the worker end's address and routes, so
``launch`` re-applies them first (``netns.ensure``); an adopted sandbox's namespace is only checked
(``netns.attach``), never recreated.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from atelet import netns, watch
from atelet.bundle import build_config, write_bundle
from atelet.cgroups import CgroupError, set_cpu_limit
from atelet.drivers.base import SandboxDriver
from atelet.errors import AteletError, internal
from atelet.images import ImageStore
from atelet.netns import WorkerNet
from atelet.proto import atelet_pb2 as pb
from atelet.runsc import Runsc, pid_alive

log = logging.getLogger(__name__)

SANDBOX_CLASS = "gvisor"

CPU_MILLIS_ANNOTATION = "dev.ate.cpu-millis"
"""The bundle's annotation that keeps the template's CPU limit (millicores) for ``launch``."""


def confine(bundle: Path, pid: int) -> None:
    """Write the CPU limit ``prepare`` recorded in ``bundle`` (none: nothing to do) into the
    cgroup of the sandbox process ``pid``; idempotent.

    Raises:
        OSError, ValueError: the bundle's config cannot be read.
        CgroupError: the cgroup cannot be found or written.
    """
    config = json.loads((bundle / "config.json").read_text())
    cpu_millis = int(config.get("annotations", {}).get(CPU_MILLIS_ANNOTATION, "0"))
    if cpu_millis > 0:
        set_cpu_limit(pid, cpu_millis)


class GVisorDriver(SandboxDriver):
    """gVisor sandboxes under one runsc state root.

    Args:
        binary: the runsc executable.
        root: runsc's ``--root`` (its state dir).
        images: where ``prepare`` unpacks the container's image.
    """

    sandbox_class = SANDBOX_CLASS
    exit_grace_seconds = watch.STATUS_GRACE_SECONDS

    def __init__(self, binary: str, root: Path, images: ImageStore) -> None:
        self.runsc = Runsc(binary, root)
        self.images = images

    async def version(self) -> str:
        """The runsc build (``runsc --version``)."""
        return await self.runsc.version()

    async def list(self) -> list[str]:
        """``runsc list``: every container under the root."""
        return await self.runsc.list()

    async def prepare(self, workdir: Path, net: WorkerNet, spec: pb.WorkloadSpec,
                      volume_dirs: dict[str, Path], hostname: str) -> Path:
        """Unpacks the image, creates the durable dirs and writes the OCI bundle into ``workdir``."""
        container = spec.containers[0]
        image = await self.images.unpack(container.image, "spec.containers[0].image")
        for d in volume_dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        # The CPU limit is left out of the bundle and written once the sandbox is up (atelet.cgroups):
        # its start is not throttled by the actor's quota.
        config = build_config(image, container, net.netns_path, volume_dirs, 0, spec.memory_bytes, hostname=hostname)
        config.setdefault("annotations", {})[CPU_MILLIS_ANNOTATION] = str(spec.cpu_millis)
        return write_bundle(workdir, config)

    async def launch(self, container_id: str, net: WorkerNet, prepared: Path, log_path: Path,
                     checkpoint: Path | None) -> None:
        """Re-applies the worker end's address, then ``runsc run`` or ``runsc restore`` (detached),
        then writes the template's CPU limit into the sandbox's cgroup (a sandbox whose limit
        cannot be written is deleted: INTERNAL)."""
        await netns.ensure(net)
        pid_file = prepared / "sandbox.pid"
        pid_file.unlink(missing_ok=True)
        if checkpoint is None:
            await self.runsc.run(container_id, prepared, log_path, pid_file=pid_file)
        else:
            await self.runsc.restore(container_id, prepared, checkpoint, log_path, pid_file=pid_file)
        try:
            confine(prepared, int(pid_file.read_text().strip()))
        except (OSError, ValueError, CgroupError) as exc:
            await self.delete_quietly(container_id)
            raise internal(f"sandbox {container_id} started, but its CPU limit could not be set, so it was "
                           f"deleted: {exc}") from exc

    async def checkpoint(self, container_id: str, image_dir: Path, *, leave_running: bool = False,
                         compress: bool = True) -> None:
        """``runsc checkpoint [--leave-running] --compression=flate-best-speed|none``; UNAVAILABLE
        when a connected socket blocked it."""
        await self.runsc.checkpoint(container_id, image_dir, leave_running=leave_running,
                                    compression="flate-best-speed" if compress else "none")

    async def freeze(self, container_id: str) -> None:
        """``runsc pause``."""
        await self.runsc.pause(container_id)

    async def thaw(self, container_id: str) -> None:
        """``runsc resume``."""
        await self.runsc.resume(container_id)

    async def kill(self, container_id: str) -> bool:
        """``runsc kill`` (SIGKILL), waiting until the sandbox process exited."""
        return await self.runsc.kill(container_id) is not None

    async def delete(self, container_id: str) -> bool:
        """``runsc delete --force``."""
        return await self.runsc.delete(container_id)

    async def delete_quietly(self, container_id: str) -> None:
        """``runsc delete --force``, logging a failure."""
        try:
            await self.runsc.delete(container_id)
        except AteletError as exc:
            log.warning("runsc delete %s failed: %s", container_id, exc.reason)

    async def alive(self, container_id: str) -> bool:
        """True when runsc knows the sandbox and its process lives."""
        state = await self.runsc.state(container_id)
        if not state:
            return False
        return pid_alive(int(state.get("pid") or 0))

    async def reattach(self, container_id: str, net: WorkerNet, listed: set[str]) -> str:
        """Checks that runsc lists the sandbox as running with a live process, writes its CPU limit
        again (``confine``), then re-applies the host end's address (``netns.attach``)."""
        if container_id not in listed:
            return "runsc no longer knows it"
        state = await self.runsc.state(container_id)
        pid = int(state.get("pid") or 0) if state else 0
        if not state or state.get("status") != "running" or not pid_alive(pid):
            return f"it is not running (runsc: {state.get('status') if state else 'unknown'}, pid {pid})"
        try:  # the previous atelet may have stopped between the start and the limit's write
            confine(Path(str(state.get("bundle", ""))), pid)
        except (OSError, ValueError, CgroupError) as exc:
            return f"its CPU limit could not be set: {exc}"
        try:
            await netns.attach(net, pid)
        except AteletError as exc:
            return f"its network is not usable: {exc.reason}"
        return ""

    def exit_watch(self, container_id: str) -> watch.ExitWatch:
        """``atelet.watch.ExitWatch``: ``runsc wait`` plus a poll of the sandbox process."""
        return watch.ExitWatch(self.runsc, container_id)
