"""ExecInActor's workflow input and result, its steps' inputs, and the atelet's Exec call.

An exec runs a command inside a RUNNING actor's sandbox for debugging (`ate exec actor NAME --
CMD...`, as `kubectl exec`), and answers its exit status and output once it ends. It does not move
the actor: its workflow does not hold the actor's lock (`actor/<atespace>/<name>`), so a suspend
is never kept waiting by it; the suspend's checkpoint ends it instead (`ended: suspended`).
"""

from __future__ import annotations

from dataclasses import dataclass

from domain.refs import ActorRef, WorkerRef

EXEC_WORKFLOW = "ExecInActor"
"""The workflow type of an exec (also the `operation` of its record in the actor's history)."""

MAX_COMMAND_ARGUMENTS = 256
MAX_COMMAND_BYTES = 64 * 1024
"""Limits of a command: how many arguments, and their bytes in all."""
MAX_EXEC_TIMEOUT_SECONDS = 3600.0
DEFAULT_EXEC_TIMEOUT_SECONDS = 60.0
EXEC_CALL_MARGIN_SECONDS = 30.0
"""The atelet call's deadline beyond the command's timeout (the atelet kills it at the timeout)."""
EXEC_OUTPUT_BYTES = 256 * 1024
"""Bytes kept of each of an exec's stdout and stderr (256 KiB): both, even with every byte
undecodable (3 bytes of U+FFFD each), stay within the 2 MB Temporal takes in one result."""


def exec_workflow_id(actor: ActorRef, exec_id: str) -> str:
    """`exec/<atespace>/<name>/<exec id>`: not the actor's lock, so a suspend need not wait."""
    return f"exec/{actor.atespace}/{actor.name}/{exec_id}"


def not_running(actor: ActorRef, state: str) -> str:
    """The refusal of an exec into `actor`, which rests in `state` (not RUNNING), saying what to do."""
    return (f"actor {actor.key} is {state}: exec runs a command in a RUNNING actor; resume it first "
            f"(`ate resume actor {actor.name} -a {actor.atespace}`, or send it a request), then exec again")


@dataclass
class ExecInput:
    """Input of the ExecInActor workflow.

    Attributes:
        actor: the actor to run the command in (RUNNING).
        command: argv, the first looked up in the image's PATH.
        timeout_seconds: how long the command may run before it is killed.
        requested_by: who asked (the token's subject), recorded in the actor's history.
    """

    actor: ActorRef
    command: list[str]
    timeout_seconds: float
    requested_by: str


@dataclass
class ExecResult:
    """What the command did: its exit status (-1 when it could not be told), its output (text,
    decoded as UTF-8 with replacement), whether each stream was cut at `EXEC_OUTPUT_BYTES`, what
    ended it ('' by itself, `timeout`, `suspended`, `stopped`), its seconds, and the worker."""

    exit_code: int
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    ended: str
    seconds: float
    worker: str


@dataclass
class BeginExecInput:
    """Input of begin_exec: the actor must be RUNNING; the exec is recorded in its history as
    `reason` (who and what)."""

    actor: ActorRef
    operation_id: str
    reason: str


@dataclass
class FinishExecInput:
    """Input of finish_exec: the exec's outcome for the actor's history (`exit 0`, `timeout`...),
    and the error when it could not run."""

    operation_id: str
    outcome: str
    error: str | None = None


@dataclass
class AteletExecInput:
    """Input of atelet_exec: the worker running the actor, and the command."""

    operation_id: str
    worker: WorkerRef
    holder: ActorRef
    command: list[str]
    timeout_seconds: float
