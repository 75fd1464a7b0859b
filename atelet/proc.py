"""Async subprocess helper shared by the modules that drive ``ip``, ``runsc`` and ``umoci``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass


@dataclass
class Result:
    """Exit status and decoded output of one command."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.returncode == 0

    def describe(self) -> str:
        """One line: the command, its exit status and the last line of its error output."""
        tail = (self.stderr.strip() or self.stdout.strip()).splitlines()[-3:]
        return f"{' '.join(self.args)} exited {self.returncode}: {' | '.join(tail)}"


async def run(args: list[str], *, timeout: float | None = 60.0, stdin: bytes | None = None) -> Result:
    """Runs ``args`` to completion, capturing stdout/stderr; kills it after ``timeout`` seconds (None: never)
    or when the caller is cancelled.

    Raises ``FileNotFoundError`` when the program does not exist and ``TimeoutError`` on timeout.
    """
    proc = await asyncio.create_subprocess_exec(
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    except (TimeoutError, asyncio.CancelledError):
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    return Result(list(args), proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))
