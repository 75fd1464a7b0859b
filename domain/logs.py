"""An actor's output (`ate logs`): the limits on its lines, what `--since` accepts, and the words of
the lifecycle events shown between the lines.

The output of an actor's sandbox (stdout and stderr share one stream: `output`) is read by the
atelet of the node it runs on, timestamped as it is read, and shipped to the api-server, which
keeps the last `DEFAULT_LOG_BYTES_PER_ACTOR` bytes of each actor in PostgreSQL (not with the
snapshot: a `local:` snapshot dies with its node, its logs must not) until the actor is deleted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from domain.operations.exec import EXEC_WORKFLOW
from domain.states import Operation

OUTPUT_STREAM = "output"
"""The stream name of a sandbox's lines: its stdout and stderr are one file on the node."""

MAX_LINE_BYTES = 16 * 1024
"""A longer line is cut into pieces of at most this many bytes (UTF-8), each a line of its own,
as container runtimes do (CRI splits long lines the same way)."""

MAX_LINES_PER_BATCH = 1000
"""At most this many lines in one delivery from a node."""

DEFAULT_LOG_BYTES_PER_ACTOR = 1024 * 1024
"""What the api-server keeps of each actor's output by default: its newest 1 MiB of lines
(setting ATE_LOG_BYTES_PER_ACTOR); older lines are dropped as new ones arrive."""

MAX_TAIL_LINES = 100_000
"""The most lines one `--tail` may ask for."""

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str) -> float:
    """Seconds in a `--since` duration: a number and a unit, `30s`, `10m`, `2h`, `1d`, `1.5h`.

    Raises:
        ValueError: not such a duration (the message names the field and the accepted forms).
    """
    match = _DURATION.match(text.strip())
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(f"since: {text!r} is not a duration; give a positive number and a unit s, m, h or d, "
                         "e.g. 10m or 2h")  # fmt: skip
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def clean_text(data: bytes) -> str:
    """Sandbox output as text a database and a terminal take: undecodable bytes and NUL become
    U+FFFD, a trailing carriage return (CRLF line ends) goes."""
    text = data.decode(errors="replace").replace("\x00", "\ufffd")
    return text[:-1] if text.endswith("\r") else text


_EVENT_WORDS: dict[str, str] = {
    Operation.RESUME: "resumed",
    Operation.SUSPEND: "suspended",
    Operation.PAUSE: "paused",
    Operation.REVERT: "reverted",
    Operation.FREEZE: "frozen",
    Operation.WAKE: "woken",
    Operation.UPLOAD: "snapshot uploaded",
    Operation.GOLDEN_SNAPSHOT: "golden snapshot taken",
}


@dataclass(frozen=True)
class LifecycleEvent:
    """One finished operation of the actor, as `ate logs` shows it between the lines.

    Attributes:
        operation: its workflow type (`ResumeActor`, `ExecInActor`, `NodeLost`...).
        outcome: `ok`, or how it ended otherwise (`abandoned`, `failed`, `exit 3`...).
        worker: where it ran, `<pool>/<worker>`, if known.
        reason: why ate started it by itself (`idle for 300 s`), or what an exec ran.
        error: what went wrong, when it did.
    """

    operation: str
    outcome: str
    worker: str | None = None
    reason: str | None = None
    error: str | None = None

    def text(self) -> str:
        """E.g. `resumed on default/w-1`, `suspended: idle for 300 s`, `SuspendActor abandoned`,
        `ResumeActor failed: <error>`, `exec by alice: cat /data/count.txt: exit 0`."""
        if self.operation == EXEC_WORKFLOW:
            return f"exec {self.reason or ''}: {self.outcome}"
        if self.outcome != "ok":
            return f"{self.operation} {self.outcome}" + (f": {self.error}" if self.error else "")
        text = _EVENT_WORDS.get(self.operation, self.operation)
        if self.operation == Operation.RESUME and self.worker:
            text += f" on {self.worker}"
        return text + (f": {self.reason}" if self.reason else "")
