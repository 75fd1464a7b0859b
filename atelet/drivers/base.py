"""The interface between the node and the runtime of one sandbox class: ``SandboxDriver``.

The node keeps everything that does not depend on the runtime: the workers and their records,
the operation log, probes, durable dirs, snapshot files and exit reports. A driver only prepares,
starts, checkpoints, stops, lists and re-attaches the sandboxes of its class, each named by a
container ID the node chooses, and tells when one exits on its own. ``atelet.drivers.gvisor`` is
the driver of class ``gvisor`` (runsc).

What the node asks of a driver, per call:

- Run: ``prepare``, then ``launch`` with no checkpoint;
- Restore: ``prepare``, then ``launch`` with the snapshot's ``checkpoint/`` dir (scope FULL) or none
  (scope DATA: the durable dirs were extracted before ``prepare``);
- Checkpoint FULL: ``checkpoint`` into the staging dir's ``checkpoint/`` (the sandbox exits); DATA:
  ``kill`` first; then the node archives the durable dirs. A checkpoint to object storage,
  whose upload can fail, ``pause_for_save``s the sandbox first, checkpoints it with
  ``leave_running``, and ``kill``s it only once the snapshot is stored (``resume_after_save`` when
  it could not be: the actor runs on as if nothing happened). After a failed checkpoint, ``alive``
  tells whether the sandbox still runs;
- Freeze / Thaw (the hot tier): ``freeze_in_place`` / ``thaw_in_place``; a Checkpoint of a
  frozen sandbox thaws it first, ``kill`` and ``delete`` work on a frozen one;
- Terminate, fence, node stop: ``kill``, then ``delete_quietly`` in the background;
- adoption after an atelet restart: ``list`` once, then ``reattach`` per recorded sandbox (with
  ``frozen`` when it was recorded frozen); the
  sandboxes no adopted record names are removed with ``delete``;
- exit events: ``exit_watch`` per running sandbox;
- Exec (``atelet.exec_ops``), only when ``can_exec``: ``exec_in`` runs a command in a running
  sandbox; the node cancels it to end it (before a checkpoint, at its timeout).

Every method raises ``AteletError`` (``atelet.errors``) on failure unless it says otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from atelet.errors import precondition
from atelet.netns import WorkerNet
from atelet.proto import atelet_pb2 as pb


class ExitWatch(Protocol):
    """Watches one sandbox for its exit. The node always calls ``close`` at the end."""

    async def gone(self) -> None:
        """Returns once the sandbox exited or died (the node cancels it when it stops the sandbox)."""
        ...

    async def reason(self, log_path: Path) -> str:
        """One line saying how the sandbox ended, after ``gone`` returned.

        Args:
            log_path: the actor's log (the sandbox's output), for its last line.

        Returns:
            e.g. ``exit status 137 (killed by signal 9, SIGKILL: ...); last log line: ...``. Waits at
            most the driver's ``exit_grace_seconds``.
        """
        ...

    async def close(self) -> None:
        """Releases what the watch holds (e.g. a helper process); safe to call twice."""
        ...


class SandboxDriver(Protocol):
    """Prepares, starts, checkpoints, stops and finds the sandboxes of one sandbox class.

    Attributes:
        sandbox_class: the class it runs (``gvisor``): written into every manifest the node
            checkpoints with it, and the only class of snapshot it restores.
        exit_grace_seconds: how long ``ExitWatch.reason`` may wait after ``gone`` (seconds).
        follows_saves: whether ``checkpoint`` records a save in its ``journal`` so that the save
            goes on without the atelet and ``checkpoint_done`` tells how it ended
            (``atelet.checkpoint_ops``).
        can_exec: whether ``exec_in`` works (False: Exec is refused for the class).
    """

    sandbox_class: str
    exit_grace_seconds: float
    follows_saves: bool
    can_exec: bool = False

    async def exec_in(self, container_id: str, command: Sequence[str], stdout: Path, stderr: Path) -> int:
        """Runs ``command`` inside the running sandbox, its output into the files ``stdout`` and
        ``stderr``, and returns its exit status once it ends. Cancelled, it kills the command.

        Raises:
            AteletError: INTERNAL when it cannot be started; FAILED_PRECONDITION when the class
                has no exec (``can_exec`` False).
        """
        raise precondition(f"exec is not available for sandbox class {self.sandbox_class} yet")

    async def version(self) -> str:
        """The runtime's build (e.g. ``0.0~20240729.0``), pinned into every FULL manifest: a
        FULL snapshot restores only with the build that wrote it."""
        ...

    async def list(self) -> list[str]:
        """The container IDs of every sandbox this driver's state holds (running or not)."""
        ...

    async def prepare(self, workdir: Path, net: WorkerNet, spec: pb.WorkloadSpec,
                      volume_dirs: dict[str, Path], hostname: str) -> Path:
        """Makes everything a sandbox of ``spec`` needs before it can start; starts nothing.

        Args:
            workdir: the worker's directory for the runtime's files (rewritten for each sandbox).
            net: the worker's network (its namespace exists).
            spec: the validated workload (exactly one container).
            volume_dirs: host dir per durable-dir volume name; created here when missing.
            hostname: the sandbox's hostname.

        Returns:
            What ``launch`` takes (for gVisor, the OCI bundle dir).

        Raises:
            AteletError: e.g. INVALID_ARGUMENT or NOT_FOUND for the image, INTERNAL.
        """
        ...

    async def launch(self, container_id: str, net: WorkerNet, prepared: Path, log_path: Path,
                     checkpoint: Path | None) -> None:
        """Starts sandbox ``container_id`` in the worker's network and returns once it started.

        Args:
            container_id: the new sandbox's ID (chosen by the node, unique).
            net: the worker's network.
            prepared: what ``prepare`` returned.
            log_path: the file the sandbox's output is appended to.
            checkpoint: None to boot fresh; else the ``checkpoint/`` dir of a FULL snapshot to
                restore from.

        Raises:
            AteletError: INTERNAL when it did not start (the node then calls ``delete``).
        """
        ...

    async def checkpoint(self, container_id: str, image_dir: Path, *, leave_running: bool = False,
                         compress: bool = True, journal: Path | None = None) -> None:
        """Saves the sandbox's whole state into ``image_dir``; the sandbox exits, or with
        ``leave_running`` stays as it was (a frozen one stays frozen). ``compress``: whether the
        memory is compressed (smaller, slower to write and to restore). ``journal``: a directory
        where a driver that can records the save so that it goes on when the atelet dies or the
        caller is cancelled (``checkpoint_done`` then tells how it ended).

        Raises:
            AteletError: UNAVAILABLE when the sandbox cannot be saved now (retryable), NOT_FOUND,
                INTERNAL.
        """
        ...

    async def checkpoint_done(self, journal: Path) -> bool:
        """How the checkpoint recorded in ``journal`` went: True once it succeeded, False while it
        still runs.

        Raises:
            AteletError: as ``checkpoint`` would have, when it failed or cannot be told.
        """
        ...

    async def pause_for_save(self, container_id: str) -> None:
        """Stops every task of the sandbox for a checkpoint with ``leave_running`` (its state stays
        in memory and the runtime can still save it). Not the hot tier: see ``freeze_in_place``."""
        ...

    async def resume_after_save(self, container_id: str) -> None:
        """Lets a sandbox held by ``pause_for_save`` run again."""
        ...

    async def freeze_in_place(self, container_id: str) -> str:
        """Freeze (the hot tier): stops the sandbox where it is; it keeps its memory and uses no
        CPU until ``thaw_in_place``. Returns once every task stopped; idempotent.

        Returns:
            How it was frozen, for logs and the response (e.g. ``cgroup v1 freezer``, ``qmp stop``).

        Raises:
            AteletError: UNAVAILABLE when it could not be frozen in time (it runs on), NOT_FOUND,
                INTERNAL.
        """
        ...

    async def thaw_in_place(self, container_id: str) -> str:
        """Lets a sandbox ``freeze_in_place`` stopped run again; returns once it runs.

        Returns:
            How it was thawed, '' when it was not frozen.

        Raises:
            AteletError: NOT_FOUND, INTERNAL.
        """
        ...

    async def kill(self, container_id: str) -> bool:
        """Stops the sandbox and returns once its process is gone (it is not deleted).

        Returns:
            True when a running sandbox was there, False when there was none.
        """
        ...

    async def delete(self, container_id: str) -> bool:
        """Kills (if needed) and removes the sandbox.

        Returns:
            False when there was no such sandbox.
        """
        ...

    async def delete_quietly(self, container_id: str) -> None:
        """``delete`` of a sandbox that is already dead, when nothing waits for the outcome: a
        failure is logged, never raised."""
        ...

    async def alive(self, container_id: str) -> bool:
        """True while the sandbox's process exists (asked after a failed checkpoint)."""
        ...

    async def reattach(self, container_id: str, net: WorkerNet, listed: set[str], *, frozen: bool = False) -> str:
        """Takes over a sandbox a previous atelet process started, if it still runs.

        Args:
            container_id: the sandbox the worker's record names.
            net: the worker's network, unchanged since the record was written.
            listed: what ``list`` returned at this start.
            frozen: the record says it was frozen (Freeze): it is taken over frozen, and frozen
                again should it run (the previous atelet died between its record and the freeze).

        Returns:
            '' when the sandbox runs and its network is usable again; else why not, one line
            (the node then leaves the worker idle and removes the sandbox with ``delete``).
        """
        ...

    def exit_watch(self, container_id: str) -> ExitWatch:
        """A watch of the running sandbox ``container_id`` (armed by ``ExitWatch.gone``)."""
        ...
