"""runsc (gVisor), one coroutine per verb, each an async subprocess with this atelet's own ``--root``.

Global flags on every call: ``--root <state_dir>/runsc``, ``--net-disconnect-ok`` (open TCP
connections are dropped at checkpoint instead of failing it) and ``--overlay2=root:memory`` (the
shared, read-only unpacked image is never written: each sandbox's rootfs changes live in its
memory and are part of a FULL checkpoint).

``run`` and ``restore`` execute inside a private mount namespace whose ``/proc/sys/net`` is an
empty tmpfs: on this kernel runsc otherwise believes it is in the root network namespace and
refuses to start networking (see docs GVISOR.md). A detached sandbox keeps runsc's stdout and
stderr: they go to the per-actor log file given by the caller.

Every failure raises ``AteletError`` with a gRPC code: NOT_FOUND (no such container), UNAVAILABLE
(a connected socket blocked a checkpoint: retryable), INTERNAL (anything else, with runsc's
message and the log path).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from atelet import proc
from atelet.errors import AteletError, internal, not_found, unavailable

_PRIVATE_NET_SYSCTL = 'mount -t tmpfs -o size=4k,mode=0555 ate-empty /proc/sys/net && exec "$@"'

# A checkpoint process that outlives the atelet: "$0" is its journal dir (see Runsc.checkpoint).
_JOURNALED = ('echo $$ > "$0/pid"; "$@" > "$0/output" 2>&1; echo $? > "$0/status.tmp"; '
              'mv "$0/status.tmp" "$0/status"')


def _read_from(path: Path, offset: int) -> str:
    """The text of ``path`` from byte ``offset`` on."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")


def journal_outcome(journal: Path) -> proc.Result | None:
    """How the journaled runsc call recorded in ``journal`` ended (``Runsc.checkpoint``): its exit
    status and output; None while its process still runs; exit status -1 when the process is
    gone without a status (killed)."""
    args = ["runsc", "checkpoint", f"(journal {journal})"]
    try:
        code = int((journal / "status").read_text().strip())
    except (OSError, ValueError):
        try:
            pid = int((journal / "pid").read_text().strip())
        except (OSError, ValueError):
            pid = 0
        if pid and pid_alive(pid):
            return None
        return proc.Result(args, -1, "", "the checkpoint process ended without recording its exit status")
    try:
        output = (journal / "output").read_text(errors="replace")
    except OSError:
        output = ""
    return proc.Result(args, code, "", output)


async def wait_exited(pid: int, timeout: float) -> bool:
    """Polls (every 10 ms) until ``pid`` is gone or a zombie; False on timeout."""
    deadline = asyncio.get_running_loop().time() + timeout
    while pid_alive(pid):
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


class Runsc:
    """Drives one runsc state root. ``binary`` is the runsc executable, ``root`` its state dir."""

    def __init__(self, binary: str, root: Path) -> None:
        self.binary = binary
        self.root = Path(root)
        self._version: str | None = None

    def _global(self) -> list[str]:
        return [self.binary, f"--root={self.root}", "--net-disconnect-ok", "--overlay2=root:memory"]

    async def version(self) -> str:
        """The runsc build, e.g. ``0.0~20240729.0`` (pinned into every FULL snapshot's manifest)."""
        if self._version is None:
            result = await proc.run([self.binary, "--version"], timeout=20)
            match = re.search(r"runsc version (\S+)", result.stdout)
            if not result.ok or not match:
                raise internal(f"cannot tell the runsc version: {result.describe()}")
            self._version = match.group(1)
        return self._version

    async def _detached(self, verb: list[str], log_path: Path, timeout: float) -> None:
        """Runs a verb that leaves a sandbox behind; its output (and the sandbox's) goes to log_path."""
        self.root.mkdir(parents=True, exist_ok=True)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        offset = log_path.stat().st_size if log_path.exists() else 0
        args = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _PRIVATE_NET_SYSCTL, "sh",
                *self._global(), *verb]
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            child = await asyncio.create_subprocess_exec(
                *args, stdin=asyncio.subprocess.DEVNULL, stdout=log_fd, stderr=log_fd)
        finally:
            os.close(log_fd)
        try:
            code = await asyncio.wait_for(child.wait(), timeout)
        except (TimeoutError, asyncio.CancelledError):
            child.kill()
            await child.wait()
            raise
        if code != 0:
            tail = _read_from(log_path, offset).strip().splitlines()[-3:]
            raise internal(f"runsc {verb[0]} failed (exit {code}): {' | '.join(tail)} (log {log_path})")

    async def run(self, container_id: str, bundle: Path, log_path: Path, *, timeout: float = 60,
                  pid_file: Path | None = None) -> None:
        """``runsc run -detach``: boots the bundle's sandbox and returns once it started; the
        sandbox's pid goes to ``pid_file`` when given."""
        pid = [f"-pid-file={pid_file}"] if pid_file is not None else []
        await self._detached(["run", "-detach", *pid, f"--bundle={bundle}", container_id], log_path, timeout)

    async def restore(self, container_id: str, bundle: Path, image_path: Path, log_path: Path,
                      *, timeout: float = 120, pid_file: Path | None = None) -> None:
        """``runsc restore --detach``: restores the checkpoint in image_path into a new sandbox;
        the sandbox's pid goes to ``pid_file`` when given."""
        pid = [f"-pid-file={pid_file}"] if pid_file is not None else []
        await self._detached(
            ["restore", "-detach", *pid, f"--bundle={bundle}", f"--image-path={image_path}", container_id],
            log_path, timeout)

    async def _call(self, verb: list[str], timeout: float | None) -> proc.Result:
        return await proc.run([*self._global(), *verb], timeout=timeout)

    @staticmethod
    def failure(result: proc.Result, container_id: str) -> AteletError:
        """The AteletError of a failed runsc call (see the module doc for the codes)."""
        text = (result.stderr + result.stdout).lower()
        if "connected state" in text:
            return unavailable(f"a connected socket blocked the checkpoint of {container_id}; retry: "
                               f"{result.describe()}")
        if "does not exist" in text or "not found" in text:
            return not_found(f"no sandbox {container_id}: {result.describe()}")
        return internal(result.describe())

    async def checkpoint(self, container_id: str, image_path: Path, *, leave_running: bool = False,
                         compression: str | None = None, timeout: float = 300,
                         journal: Path | None = None) -> None:
        """``runsc checkpoint --image-path``: saves the sandbox to image_path; the sandbox exits,
        or with ``leave_running`` stays as it was (paused when it was paused). ``compression``:
        ``-compression`` (``none`` or ``flate-best-speed``; None: runsc's default, flate).

        With ``journal`` (a directory, emptied first) the runsc process runs in its own session
        and records its pid, output and exit status there, so that it finishes when this atelet
        dies or the caller is cancelled, and a later atelet learns how it ended
        (``checkpoint_outcome``). A timeout still kills it.
        """
        image_path.mkdir(parents=True, exist_ok=True)
        flags = ["--leave-running"] if leave_running else []
        if compression is not None:
            flags.append(f"--compression={compression}")
        verb = ["checkpoint", *flags, f"--image-path={image_path}", container_id]
        if journal is None:
            result = await self._call(verb, timeout)
        else:
            result = await self._journaled(verb, journal, timeout)
        if not result.ok:
            raise self.failure(result, container_id)

    async def _journaled(self, verb: list[str], journal: Path, timeout: float) -> proc.Result:
        """Runs a runsc verb detached from this process, recording it in ``journal``; cancelling
        the caller leaves it running."""
        shutil.rmtree(journal, ignore_errors=True)
        journal.mkdir(parents=True)
        child = await asyncio.create_subprocess_exec(
            "sh", "-c", _JOURNALED, str(journal), *self._global(), *verb, start_new_session=True,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        try:
            await asyncio.wait_for(asyncio.shield(child.wait()), timeout)
        except TimeoutError:
            os.killpg(child.pid, signal.SIGKILL)
            await child.wait()
            raise
        outcome = journal_outcome(journal)
        assert outcome is not None  # the wrapper has exited
        return outcome

    async def pause(self, container_id: str, *, timeout: float = 30) -> None:
        """``runsc pause``: freezes every task of the sandbox."""
        result = await self._call(["pause", container_id], timeout)
        if not result.ok:
            raise self.failure(result, container_id)

    async def resume(self, container_id: str, *, timeout: float = 30) -> None:
        """``runsc resume``: lets a paused sandbox run again."""
        result = await self._call(["resume", container_id], timeout)
        if not result.ok:
            raise self.failure(result, container_id)

    async def exec(self, container_id: str, command: Sequence[str], stdout: Path, stderr: Path) -> int:
        """``runsc exec``: runs ``command`` in the sandbox next to its workload, its output into
        the files ``stdout`` and ``stderr``, and returns its exit status once it ends (runsc's
        own, e.g. 128 + a signal's number). Cancelling the call kills the process inside the
        sandbox (by its PID there, from ``--internal-pid-file``) and the ``runsc exec`` process.

        Raises:
            AteletError: INTERNAL when runsc cannot be started.
        """
        pid_file = stdout.with_name("pid")
        out = os.open(stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err = os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            child = await asyncio.create_subprocess_exec(
                *self._global(), "exec", f"--internal-pid-file={pid_file}", container_id, *command,
                stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=err)
        except OSError as exc:
            raise internal(f"runsc exec could not start: {exc}") from exc
        finally:
            os.close(out)
            os.close(err)
        try:
            return await child.wait()
        except asyncio.CancelledError:
            with contextlib.suppress(OSError, ValueError):
                inside = int(pid_file.read_text().strip())
                await self._call(["kill", f"--pid={inside}", container_id, "KILL"], 10)
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            await child.wait()
            raise

    async def kill(self, container_id: str, signal: str = "KILL") -> int | None:
        """Sends ``signal`` to the sandbox and waits (up to 10 s) until its process has exited.

        Returns the sandbox PID (None when runsc knows no such running sandbox). Waiting stops at
        the zombie state: on some hosts PID 1 reaps orphans only every second or so, and
        ``runsc delete`` alone would wait for that.
        """
        state = await self.state(container_id)
        pid = int(state.get("pid") or 0) if state else 0
        if pid <= 0:
            return None
        result = await self._call(["kill", container_id, signal], 20)
        if not result.ok and pid_alive(pid):
            raise self.failure(result, container_id)
        await wait_exited(pid, 10.0)
        return pid

    async def delete(self, container_id: str, *, timeout: float = 60) -> bool:
        """``runsc delete --force``: kills and removes the sandbox; False when it did not exist."""
        result = await self._call(["delete", "--force", container_id], timeout)
        if result.ok:
            return True
        error = self.failure(result, container_id)
        if error.code.name == "NOT_FOUND":
            return False
        raise error

    async def wait(self, container_id: str) -> int | None:
        """``runsc wait --rootpid=1``: blocks until the container's init process (PID 1 of the sandbox)
        exits and returns its exit status (128 + signal when a signal killed it); None when runsc
        cannot tell (e.g. the sandbox process itself died). Cancelling the call kills the ``runsc
        wait`` process. (A plain ``runsc wait`` also waits until PID 1 of the host reaped the dead
        sandbox process, ~1.5 s on some hosts; waiting on the PID answers at once.)"""
        result = await self._call(["wait", "--rootpid=1", container_id], None)
        if not result.ok:
            return None
        try:
            status = json.loads(result.stdout).get("exitStatus")
        except (json.JSONDecodeError, AttributeError):
            return None
        return status if isinstance(status, int) else None

    async def state(self, container_id: str) -> dict[str, Any] | None:
        """``runsc state``: the OCI state (``status``: created|running|stopped…), None if unknown."""
        result = await self._call(["state", container_id], 20)
        if not result.ok:
            return None
        try:
            state = json.loads(result.stdout)
        except json.JSONDecodeError:
            return None
        return state if isinstance(state, dict) else None

    async def list(self) -> list[str]:
        """``runsc list -q``: IDs of every container under this root."""
        if not self.root.exists():
            return []
        result = await self._call(["list", "-quiet"], 20)
        if not result.ok:
            raise internal(result.describe())
        return [line.strip() for line in result.stdout.splitlines() if line.strip()]

    def saved_state(self, container_id: str) -> dict[str, Any] | None:
        """What runsc keeps on disk of the container (``<root>/<id>_sandbox:<sandbox id>.state``,
        JSON: ``status``, ``bundleDir``, ``sandbox.pid``...), read without running runsc: unlike
        ``state``, it answers for a sandbox frozen by the cgroup freezer, which cannot answer
        runsc's RPC (``atelet.freezer``). None when there is no such file or it cannot be read.
        The status is what runsc last wrote (``running`` for a cgroup-frozen sandbox)."""
        for path in self.root.glob(f"{_glob_escape(container_id)}_sandbox:*.state"):
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):
                return None
            return state if isinstance(state, dict) else None
        return None

    def saved_pid(self, container_id: str) -> int:
        """The sandbox process's PID from ``saved_state`` (0 when unknown)."""
        state = self.saved_state(container_id)
        sandbox = state.get("sandbox") if state else None
        try:
            return int(sandbox.get("pid") or 0) if isinstance(sandbox, dict) else 0
        except (TypeError, ValueError):
            return 0

    def saved_ids(self) -> builtins.list[str]:
        """The container IDs of the state files under the root (what ``runsc list`` lists, read
        without its RPC to each sandbox, which waits on a cgroup-frozen one)."""
        if not self.root.is_dir():
            return []
        return sorted({p.name.split("_sandbox:", 1)[0] for p in self.root.glob("*_sandbox:*.state")})

    def describe(self) -> str:
        """The global command line, for logs."""
        return shlex.join(self._global())


def _glob_escape(name: str) -> str:
    """``name`` with glob's special characters escaped."""
    return re.sub(r"([*?\[\]])", r"[\1]", name)
