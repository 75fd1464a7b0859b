"""The kernel's cgroup freezer of one gVisor sandbox: finding it, freezing and thawing it, and
waiting until the kernel reports the state reached (Freeze, the hot tier: ``atelet.freeze_ops``).

Why the freezer and not ``runsc pause``: measured on this machine's kind (cgroup v1 with a
``freezer`` hierarchy, runsc making ``/sys/fs/cgroup/freezer/<container id>``), writing ``FROZEN``
to ``freezer.state`` took 4-12 ms from a shell (0.4 ms from this process) and ``THAWED`` ~2 ms
(0.35 ms); ``cpuacct.usage`` did not move for 1 s while frozen, and the counter answered right
after the thaw with its memory. ``runsc pause`` / ``runsc resume`` each took ~20 ms (a Go binary's
exec plus an RPC to the sentry) and leave the freezer THAWED (runsc pauses the sentry itself).

A frozen sandbox cannot answer runsc: ``runsc state``, ``runsc list`` and ``runsc events`` each
waited more than 5 s on one (measured), so whatever asks runsc about a sandbox that may be
frozen thaws it first or reads runsc's state file instead (``atelet.drivers.gvisor``).

cgroup v1: ``freezer.state`` (write ``FROZEN`` / ``THAWED``; reads ``FREEZING`` until every task
stopped). cgroup v2: ``cgroup.freeze`` (write ``1`` / ``0``; ``cgroup.events`` says ``frozen 1``
once every task stopped). Only a cgroup whose path names the container is used (as
``atelet.cgroups`` does for the CPU limit): freezing a shared one would stop other processes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from atelet.cgroups import CGROUP_ROOT, CgroupError

FREEZE_TIMEOUT_SECONDS = 5.0
"""How long the kernel may take to stop every task of the sandbox (measured: 4-12 ms)."""

_FIRST_POLL = 0.0005  # seconds between two reads of the state, growing to _LAST_POLL
_LAST_POLL = 0.01
_REWRITE_SECONDS = 0.05  # v1: FROZEN is written again while FREEZING (the kernel retries the stragglers)


@dataclass(frozen=True)
class Freezer:
    """The freezer of one cgroup.

    Attributes:
        directory: the cgroup's directory (e.g. ``/sys/fs/cgroup/freezer/<container id>``).
        version: 1 (``freezer.state``) or 2 (``cgroup.freeze``).
    """

    directory: Path
    version: int

    @property
    def method(self) -> str:
        """``cgroup v1 freezer`` or ``cgroup v2 freezer`` (for logs and responses)."""
        return f"cgroup v{self.version} freezer"

    def frozen(self) -> bool:
        """True when the kernel reports every task stopped (v1 ``FROZEN``; v2 ``frozen 1``), or
        a freeze was asked (v1 ``FREEZING``; v2 ``cgroup.freeze`` 1).

        Raises:
            CgroupError: the files cannot be read (the cgroup is gone).
        """
        if self.version == 1:
            return self._read("freezer.state") in ("FROZEN", "FREEZING")
        return self._read("cgroup.freeze") == "1" or self._events_frozen()

    async def freeze(self, timeout: float = FREEZE_TIMEOUT_SECONDS) -> float:
        """Freezes the cgroup and waits until the kernel reports every task stopped.

        Returns:
            Seconds it took.

        Raises:
            CgroupError: a file cannot be written or read, or the kernel did not report the
                cgroup frozen within ``timeout`` seconds (then it is thawed again, so the
                sandbox runs on as before).
        """
        start = time.monotonic()
        if self.version == 1:
            self._write("freezer.state", "FROZEN")
            reached = await _until(lambda: self._read("freezer.state") == "FROZEN",
                                   lambda: self._write("freezer.state", "FROZEN"), start + timeout)
        else:
            self._write("cgroup.freeze", "1")
            reached = await _until(self._events_frozen, lambda: None, start + timeout)
        if not reached:
            await self.thaw(timeout)
            raise CgroupError(f"the kernel did not freeze {self.directory} within {timeout:.0f} s; thawed it again")
        return time.monotonic() - start

    async def thaw(self, timeout: float = FREEZE_TIMEOUT_SECONDS) -> float:
        """Thaws the cgroup and waits until the kernel reports it running (v1 ``THAWED``; v2
        ``frozen 0``).

        Returns:
            Seconds it took.

        Raises:
            CgroupError: a file cannot be written or read, or the state was not reached in time.
        """
        start = time.monotonic()
        if self.version == 1:
            self._write("freezer.state", "THAWED")
            reached = await _until(lambda: self._read("freezer.state") == "THAWED", lambda: None, start + timeout)
        else:
            self._write("cgroup.freeze", "0")
            reached = await _until(lambda: not self._events_frozen(), lambda: None, start + timeout)
        if not reached:
            raise CgroupError(f"the kernel did not thaw {self.directory} within {timeout:.0f} s")
        return time.monotonic() - start

    def _events_frozen(self) -> bool:
        for line in self._read("cgroup.events").splitlines():
            key, _, value = line.partition(" ")
            if key == "frozen":
                return value.strip() == "1"
        raise CgroupError(f"{self.directory / 'cgroup.events'} has no 'frozen' line")

    def _read(self, name: str) -> str:
        try:
            return (self.directory / name).read_text().strip()
        except OSError as exc:
            raise CgroupError(f"cannot read {self.directory / name}: {exc}") from exc

    def _write(self, name: str, value: str) -> None:
        try:
            (self.directory / name).write_text(value)
        except OSError as exc:
            raise CgroupError(f"cannot write {value} into {self.directory / name}: {exc}") from exc


async def _until(done: Callable[[], bool], again: Callable[[], object], deadline: float) -> bool:
    """Polls ``done()`` (sleeping 0.5 ms, growing to 10 ms) until it is true or ``deadline``
    (monotonic seconds) passed, calling ``again()`` every ``_REWRITE_SECONDS``."""
    delay = _FIRST_POLL
    rewritten = time.monotonic()
    while not done():
        now = time.monotonic()
        if now > deadline:
            return False
        if now - rewritten > _REWRITE_SECONDS:
            again()
            rewritten = now
        await asyncio.sleep(delay)
        delay = min(delay * 2, _LAST_POLL)
    return True


def find_freezer(pid: int, container_id: str, root: Path = CGROUP_ROOT) -> Freezer:
    """The freezer of the cgroup of process ``pid``, the sandbox of runsc container
    ``container_id``: the v1 ``freezer`` hierarchy's when mounted, else the v2 cgroup's (under
    ``root``, or ``root/unified`` on a hybrid host).

    Raises:
        CgroupError: the process is gone, it has no freezer cgroup under ``root``, or its
            cgroup's path does not name the container (a cgroup it shares with other processes).
    """
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError as exc:
        raise CgroupError(f"cannot read the cgroups of process {pid}: {exc}") from exc
    found: list[tuple[Freezer, str]] = []  # (freezer, the cgroup's path in its hierarchy)
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "freezer" in controllers.split(","):
            directory = root / controllers / path.lstrip("/")
            if (directory / "freezer.state").exists():
                found.append((Freezer(directory, 1), path))
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            for base in (root, root / "unified"):
                directory = base / path.lstrip("/")
                if (directory / "cgroup.freeze").exists():
                    found.append((Freezer(directory, 2), path))
                    break
    for freezer, path in found:
        if any(container_id in part for part in PurePosixPath(path).parts):
            return freezer
    if found:
        raise CgroupError(f"the freezer cgroup of sandbox {container_id} (process {pid}) is "
                          f"{found[0][0].directory}, not one runsc made for it")
    raise CgroupError(f"no freezer cgroup of process {pid} under {root} (its cgroups: {'; '.join(lines)})")
