"""The driver of sandbox class ``gvisor``: ``SandboxDriver`` over runsc.

Composes the gVisor-specific modules: ``atelet.runsc`` (one coroutine per runsc verb),
``atelet.bundle`` (the OCI bundle of a sandbox, from the unpacked image of ``atelet.images``) and
``atelet.watch`` (``runsc wait`` plus a poll of the sandbox process, for exits). It also owns two
quirks of runsc with network namespaces: runsc strips the worker end's address and routes, so
``launch`` re-applies them first (``netns.ensure``); an adopted sandbox's namespace is only checked
(``netns.attach``), never recreated.

Freeze (the hot tier, ``freeze_in_place``) uses the kernel's cgroup freezer (``atelet.freezer``),
``runsc pause`` only when the sandbox has no freezer cgroup of its own. A cgroup-frozen sandbox
cannot answer runsc's RPCs (``runsc state``, ``list``, ``kill`` wait on it), so ``list`` reads
runsc's state files, and ``kill``, ``delete`` and ``alive`` thaw it or read those files first.
The checkpoint to object storage holds the sandbox with ``runsc pause`` (``pause_for_save``),
which runsc's checkpoint RPC can still answer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from atelet import netns, watch
from atelet.bundle import build_config, cpu_resources, write_bundle
from atelet.cgroups import CgroupError, SharedCgroup, set_cpu_limit
from atelet.drivers.base import SandboxDriver
from atelet.egress.sandbox import SandboxEgress
from atelet.errors import AteletError, internal, unavailable
from atelet.freezer import Freezer, find_freezer
from atelet.images import ImageStore
from atelet.netns import WorkerNet
from atelet.proto import atelet_pb2 as pb
from atelet.runsc import Runsc, journal_outcome, pid_alive

log = logging.getLogger(__name__)

SANDBOX_CLASS = "gvisor"

CPU_MILLIS_ANNOTATION = "dev.ate.cpu-millis"
"""The bundle's annotation that keeps the template's CPU limit (millicores) for ``launch``."""


def confine(bundle: Path, pid: int, container_id: str) -> None:
    """Write the CPU limit ``prepare`` recorded in ``bundle`` (none: nothing to do) into the
    cgroup of the sandbox process ``pid`` of container ``container_id``; idempotent.

    Raises:
        OSError, ValueError: the bundle's config cannot be read.
        SharedCgroup: the process is not in a cgroup of its container's own.
        CgroupError: the cgroup cannot be found or written.
    """
    config = json.loads((bundle / "config.json").read_text())
    cpu_millis = int(config.get("annotations", {}).get(CPU_MILLIS_ANNOTATION, "0"))
    if cpu_millis > 0:
        set_cpu_limit(pid, cpu_millis, container_id)


def limit_in_bundle(bundle: Path) -> None:
    """Move the CPU limit ``prepare`` recorded as an annotation into the bundle's resources,
    where runsc applies it before the sandbox starts (and ``confine`` then has nothing to do)."""
    path = bundle / "config.json"
    config = json.loads(path.read_text())
    cpu_millis = int(config.get("annotations", {}).pop(CPU_MILLIS_ANNOTATION, "0"))
    if cpu_millis > 0:
        resources = config.setdefault("linux", {}).setdefault("resources", {})
        resources["cpu"] = cpu_resources(cpu_millis)
    write_bundle(bundle, config)


class GVisorDriver(SandboxDriver):
    """gVisor sandboxes under one runsc state root.

    Args:
        binary: the runsc executable.
        root: runsc's ``--root`` (its state dir).
        images: where ``prepare`` unpacks the container's image.
    """

    sandbox_class = SANDBOX_CLASS
    follows_saves = True
    exit_grace_seconds = watch.STATUS_GRACE_SECONDS

    def __init__(self, binary: str, root: Path, images: ImageStore) -> None:
        self.runsc = Runsc(binary, root)
        self.images = images
        # the node's egress settings for its sandboxes (``atelet.egress.sandbox``), set by the node
        self.egress: SandboxEgress | None = None
        # True once runsc was seen to leave a sandbox in a cgroup it shares (``launch``): from then
        # on runsc applies the CPU limit itself, before the sandbox starts.
        self.limit_at_start = False

    async def version(self) -> str:
        """The runsc build (``runsc --version``)."""
        return await self.runsc.version()

    async def list(self) -> list[str]:
        """Every container under the root, from runsc's state files (``Runsc.saved_ids``: what
        ``runsc list`` lists, without its RPC to each sandbox, which waits forever on a frozen one)."""
        return self.runsc.saved_ids()

    async def prepare(self, workdir: Path, net: WorkerNet, spec: pb.WorkloadSpec,
                      volume_dirs: dict[str, Path], hostname: str) -> Path:
        """Unpacks the image, creates the durable dirs and writes the OCI bundle into ``workdir``."""
        container = spec.containers[0]
        image = await self.images.unpack(container.image, "spec.containers[0].image")
        for d in volume_dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        # The CPU limit is left out of the bundle and written once the sandbox is up (atelet.cgroups):
        # its start is not throttled by the actor's quota.
        config = build_config(image, container, net.netns_path, volume_dirs, 0, spec.memory_bytes, hostname=hostname,
                              egress=self.egress)  # fmt: skip
        config.setdefault("annotations", {})[CPU_MILLIS_ANNOTATION] = str(spec.cpu_millis)
        write_bundle(workdir, config)
        if self.limit_at_start:
            limit_in_bundle(workdir)
        return workdir

    async def launch(self, container_id: str, net: WorkerNet, prepared: Path, log_path: Path,
                     checkpoint: Path | None) -> None:
        """Re-applies the worker end's address, then ``runsc run`` or ``runsc restore`` (detached),
        then writes the template's CPU limit into the sandbox's cgroup (a sandbox whose limit
        cannot be written is deleted: INTERNAL). Should runsc have left the sandbox in a cgroup
        that is not its container's own, the limit is not written there (it would throttle the
        other processes in it): the sandbox is deleted and started again with the limit in its
        bundle, as every later one is (``limit_at_start``)."""
        try:
            await self._start(container_id, net, prepared, log_path, checkpoint)
        except SharedCgroup as exc:
            log.warning("%s; the CPU limit goes into the bundle from now on (runsc applies it before the "
                        "sandbox starts, which slows the start)", exc)
            self.limit_at_start = True
            await self.delete_quietly(container_id)
            limit_in_bundle(prepared)
            await self._start(container_id, net, prepared, log_path, checkpoint)

    async def _start(self, container_id: str, net: WorkerNet, prepared: Path, log_path: Path,
                     checkpoint: Path | None) -> None:
        """One start of the sandbox and the write of its CPU limit (``launch``).

        Raises:
            SharedCgroup: the sandbox runs, in a cgroup that is not its own.
            AteletError: runsc failed, or INTERNAL when the limit could not be written (the
                sandbox was deleted).
        """
        await netns.ensure(net)
        pid_file = prepared / "sandbox.pid"
        pid_file.unlink(missing_ok=True)
        if checkpoint is None:
            await self.runsc.run(container_id, prepared, log_path, pid_file=pid_file)
        else:
            await self.runsc.restore(container_id, prepared, checkpoint, log_path, pid_file=pid_file)
        try:
            confine(prepared, int(pid_file.read_text().strip()), container_id)
        except SharedCgroup:
            raise
        except (OSError, ValueError, CgroupError) as exc:
            await self.delete_quietly(container_id)
            raise internal(f"sandbox {container_id} started, but its CPU limit could not be set, so it was "
                           f"deleted: {exc}") from exc

    async def checkpoint(self, container_id: str, image_dir: Path, *, leave_running: bool = False,
                         compress: bool = True, journal: Path | None = None) -> None:
        """``runsc checkpoint [--leave-running] --compression=flate-best-speed|none``, recorded in
        ``journal`` when given (``Runsc.checkpoint``); UNAVAILABLE when a connected socket blocked it."""
        await self.runsc.checkpoint(container_id, image_dir, leave_running=leave_running,
                                    compression="flate-best-speed" if compress else "none", journal=journal)

    async def checkpoint_done(self, journal: Path) -> bool:
        """From the journal's exit status (``journal_outcome``); raises as ``checkpoint`` does."""
        outcome = journal_outcome(journal)
        if outcome is None:
            return False
        if not outcome.ok:
            raise Runsc.failure(outcome, f"({journal})")
        return True

    async def pause_for_save(self, container_id: str) -> None:
        """``runsc pause`` (the sentry stops itself and can still answer runsc's checkpoint RPC)."""
        await self.runsc.pause(container_id)

    async def resume_after_save(self, container_id: str) -> None:
        """``runsc resume``."""
        await self.runsc.resume(container_id)

    def _freezer(self, container_id: str) -> Freezer:
        """The sandbox's freezer cgroup, found from its PID in runsc's state file (no runsc call).

        Raises:
            CgroupError: no state file, or no freezer cgroup of the sandbox's own.
        """
        pid = self.runsc.saved_pid(container_id)
        if pid <= 0:
            raise CgroupError(f"runsc keeps no state file with a PID for sandbox {container_id}")
        return find_freezer(pid, container_id)

    def _cgroup_frozen(self, container_id: str) -> Freezer | None:
        """The sandbox's freezer when it is frozen (or freezing), else None (also when unknown)."""
        try:
            freezer = self._freezer(container_id)
            return freezer if freezer.frozen() else None
        except CgroupError:
            return None

    async def freeze_in_place(self, container_id: str) -> str:
        """Writes the freezer of the sandbox's cgroup and waits until the kernel reports every task
        stopped (``Freezer.freeze``); idempotent. Without a freezer cgroup of its own:
        ``runsc pause`` (logged).

        Returns:
            How: ``cgroup v1 freezer``, ``cgroup v2 freezer`` or ``runsc pause``.

        Raises:
            AteletError: UNAVAILABLE when the kernel did not freeze it in time (it runs on),
                NOT_FOUND / INTERNAL from runsc.
        """
        try:
            freezer = self._freezer(container_id)
        except CgroupError as exc:
            log.warning("sandbox %s has no freezer cgroup of its own (%s): freezing it with runsc pause", container_id,
                        exc)
            state = await self.runsc.state(container_id)
            if not state or state.get("status") != "paused":
                await self.runsc.pause(container_id)
            return "runsc pause"
        try:
            await freezer.freeze()
        except CgroupError as exc:
            raise unavailable(f"sandbox {container_id} was not frozen: {exc}") from exc
        return freezer.method

    async def thaw_in_place(self, container_id: str) -> str:
        """Thaws the sandbox's freezer cgroup and waits until the kernel reports it running; a
        sandbox runsc paused (``freeze_in_place`` without a freezer) gets ``runsc resume``.

        Returns:
            How (``cgroup v1 freezer``, ``cgroup v2 freezer``, ``runsc resume``), '' when it was
            not frozen.

        Raises:
            AteletError: INTERNAL when the freezer cannot be written or the kernel did not thaw
                it in time, NOT_FOUND / INTERNAL from runsc.
        """
        freezer = self._cgroup_frozen(container_id)
        if freezer is not None:
            try:
                await freezer.thaw()
            except CgroupError as exc:
                raise internal(f"sandbox {container_id} was not thawed: {exc}") from exc
            return freezer.method
        state = await self.runsc.state(container_id)  # not cgroup-frozen: runsc answers
        if state and state.get("status") == "paused":
            await self.runsc.resume(container_id)
            return "runsc resume"
        return ""

    async def _thaw_for_runsc(self, container_id: str) -> None:
        """Thaws a cgroup-frozen sandbox before runsc is asked about it (runsc would wait on it);
        a failure is logged (the runsc call then times out and says so)."""
        freezer = self._cgroup_frozen(container_id)
        if freezer is not None:
            try:
                await freezer.thaw()
                log.info("thawed the frozen sandbox %s before runsc acts on it", container_id)
            except CgroupError as exc:
                log.warning("thaw of the frozen sandbox %s failed: %s", container_id, exc)

    can_exec = True

    async def exec_in(self, container_id: str, command: Sequence[str], stdout: Path, stderr: Path) -> int:
        """``runsc exec`` (``Runsc.exec``)."""
        return await self.runsc.exec(container_id, command, stdout, stderr)

    async def kill(self, container_id: str) -> bool:
        """``runsc kill`` (SIGKILL), waiting until the sandbox process exited (a frozen sandbox is
        thawed first: under a v1 freezer the signal would wait for a thaw)."""
        await self._thaw_for_runsc(container_id)
        return await self.runsc.kill(container_id) is not None

    async def delete(self, container_id: str) -> bool:
        """``runsc delete --force`` (a frozen sandbox is thawed first)."""
        await self._thaw_for_runsc(container_id)
        return await self.runsc.delete(container_id)

    async def delete_quietly(self, container_id: str) -> None:
        """``runsc delete --force``, logging a failure."""
        try:
            await self.delete(container_id)
        except AteletError as exc:
            log.warning("runsc delete %s failed: %s", container_id, exc.reason)

    async def alive(self, container_id: str) -> bool:
        """True when runsc knows the sandbox and its process lives (a cgroup-frozen one: its state
        file's PID lives)."""
        if self._cgroup_frozen(container_id) is not None:
            return pid_alive(self.runsc.saved_pid(container_id))
        state = await self.runsc.state(container_id)
        if not state:
            return False
        return pid_alive(int(state.get("pid") or 0))

    async def reattach(self, container_id: str, net: WorkerNet, listed: set[str], *, frozen: bool = False) -> str:
        """Checks that runsc lists the sandbox as running with a live process, writes its CPU limit
        again (``confine``), then re-applies the host end's address (``netns.attach``). A sandbox
        recorded ``frozen`` is read from runsc's state file (runsc cannot answer for it), may be
        paused, and is frozen again (``freeze_in_place``, idempotent: the previous atelet may have
        died between its record and the freeze)."""
        if container_id not in listed:
            return "runsc no longer knows it"
        state = self.runsc.saved_state(container_id) if frozen else await self.runsc.state(container_id)
        runnable: tuple[str, ...] = ("running", "paused") if frozen else ("running",)
        if frozen:
            pid = self.runsc.saved_pid(container_id)
        else:
            pid = int(state.get("pid") or 0) if state else 0
        if not state or state.get("status") not in runnable or not pid_alive(pid):
            return f"it is not running (runsc: {state.get('status') if state else 'unknown'}, pid {pid})"
        try:  # the previous atelet may have stopped between the start and the limit's write
            confine(Path(str(state.get("bundle") or state.get("bundleDir") or "")), pid, container_id)
        except (OSError, ValueError, CgroupError) as exc:
            return f"its CPU limit could not be set: {exc}"
        try:
            await netns.attach(net, pid)
        except AteletError as exc:
            return f"its network is not usable: {exc.reason}"
        if frozen:
            try:
                await self.freeze_in_place(container_id)
            except AteletError as exc:
                return f"it could not be frozen again: {exc.reason}"
        return ""

    def exit_watch(self, container_id: str) -> watch.ExitWatch:
        """``atelet.watch.ExitWatch``: ``runsc wait`` plus a poll of the sandbox process."""
        return watch.ExitWatch(self.runsc, container_id)
