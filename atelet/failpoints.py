"""Failpoints: named places where the atelet can be made to stop, so tests can kill it there.

Same protocol as ``ate.failpoints`` (the atelet does not import ``ate``): off unless
``ATE_FAILPOINTS_DIR`` names a directory; reaching failpoint NAME while ``<dir>/NAME`` exists
writes ``<dir>/NAME.reached`` (with this process's PID) and waits until ``<dir>/NAME`` is removed.
Names are ``Atelet.<call>.<step>``, e.g. ``Atelet.restore.after_boot`` (the sandbox is up and its
probe answered; the response is not recorded yet).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

ENV = "ATE_FAILPOINTS_DIR"


async def failpoint(name: str, poll_seconds: float = 0.05) -> None:
    """Pauses here while failpoint ``name`` is armed; returns at once otherwise."""
    directory = os.environ.get(ENV)
    if not directory:
        return
    armed = Path(directory) / name
    if not armed.exists():
        return
    (Path(directory) / f"{name}.reached").write_text(str(os.getpid()))
    while armed.exists():
        await asyncio.sleep(poll_seconds)
