"""Failpoints: named places where a process can be made to stop, so tests can kill it there.

Off unless the environment variable `ATE_FAILPOINTS_DIR` names a directory. Then reaching
failpoint NAME while the file `<dir>/NAME` exists writes `<dir>/NAME.reached` (with this
process's PID) and waits until `<dir>/NAME` is removed. A durability test arms a failpoint,
starts an operation, waits for `.reached`, kills a process (SIGKILL), restarts it, disarms the
failpoint and checks the outcome. The idea is etcd's gofail and FreeBSD's fail(9); names are
`<Operation>.<step>`, e.g. `ResumeActor.after_bind`, in the activities, and
`Atelet.<call>.<step>`, e.g. `Atelet.restore.after_boot`, in the atelet.

Cost when off: one dictionary lookup per call.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

ENV = "ATE_FAILPOINTS_DIR"


async def failpoint(name: str, poll_seconds: float = 0.05) -> None:
    """Pause here while failpoint `name` is armed (see the module docstring); return at once otherwise."""
    directory = os.environ.get(ENV)
    if not directory:
        return
    armed = Path(directory) / name
    if not armed.exists():
        return
    (Path(directory) / f"{name}.reached").write_text(str(os.getpid()))
    while armed.exists():
        await asyncio.sleep(poll_seconds)
