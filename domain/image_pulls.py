"""A node's pull of a registry image, as it goes (issue 29: `ate create template` shows the pull's
progress while the template is Pending): how many layers the image has and how many of their
bytes are on the node so far. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class PullState(StrEnum):
    """Where a pull is: `Pulling`, `Pulled`, or `Failed` (its message says why)."""

    PULLING = "Pulling"
    PULLED = "Pulled"
    FAILED = "Failed"


@dataclass(frozen=True)
class PullProgress:
    """One look at a pull: `layers` of the image's manifest, `bytes_total` their compressed sizes
    as the manifest states them, `bytes_done` the bytes the node wrote so far (at most the total)."""

    layers: int
    bytes_total: int
    bytes_done: int
    state: PullState = PullState.PULLING
    message: str = ""

    def text(self) -> str:
        """e.g. `1.2 MiB of 3.3 MiB (2 layers)`, `pulled 3.3 MiB (2 layers)`, `failed: <why>`."""
        layers = f"{self.layers} layer{'s' if self.layers != 1 else ''}"
        if self.state is PullState.FAILED:
            return f"failed: {self.message}"
        if self.state is PullState.PULLED:
            return f"pulled {mebibytes(self.bytes_total)} ({layers})"
        return f"{mebibytes(self.bytes_done)} of {mebibytes(self.bytes_total)} ({layers})"


def mebibytes(count: int) -> str:
    """`count` bytes as `N.N MiB`."""
    return f"{count / (1 << 20):.1f} MiB"
