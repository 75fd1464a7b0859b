"""The states of actors, workers and snapshots, the operations, and the actor state table
(ARCHITECTURE.md, "Actor states"): which operation starts from which state.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from domain.liveness import NODE_LEASE_SECONDS, UNREACHABLE_GRACE_SECONDS


class ActorState(StrEnum):
    """Actor states (ARCHITECTURE.md, "Actor states")."""

    SUSPENDED = "SUSPENDED"
    RESUMING = "RESUMING"
    RUNNING = "RUNNING"
    FROZEN = "FROZEN"
    """Its sandbox is stopped in place (cgroup freezer, or a stopped VM): it keeps its worker and
    memory, uses no CPU, takes no traffic, and a resume thaws it in milliseconds."""
    UNREACHABLE = "UNREACHABLE"
    """Its node stopped answering: the actor keeps its worker (and, if the node returns within
    the grace, its sandbox and memory); it takes no traffic and no operation but a revert."""
    SUSPENDING = "SUSPENDING"
    PAUSING = "PAUSING"
    PAUSED = "PAUSED"
    REVERTING = "REVERTING"
    CRASHED = "CRASHED"


ON_WORKER = frozenset({ActorState.RUNNING, ActorState.FROZEN})
"""The resting states of an actor whose sandbox is on a worker (RUNNING, or FROZEN in place)."""


class WorkerState(StrEnum):
    """Worker states: ACTIVE takes actors; UNAVAILABLE does not."""

    ACTIVE = "ACTIVE"
    UNAVAILABLE = "UNAVAILABLE"


class SnapshotScope(StrEnum):
    """FULL: memory + rootfs delta + durable dirs. DATA: durable dirs only."""

    FULL = "FULL"
    DATA = "DATA"


class SnapshotStorage(StrEnum):
    """EXTERNAL: in the template's storage location, restorable on any node. LOCAL: on one
    node's disk only (a pause); the actor is pinned to that node while it has one."""

    EXTERNAL = "EXTERNAL"
    LOCAL = "LOCAL"


class SnapshotState(StrEnum):
    """PENDING: being written (never restored from). COMPLETED: data stored and verified."""

    PENDING = "PENDING"
    COMPLETED = "COMPLETED"


class Operation(StrEnum):
    """Workflow type names; also the value of the `AteOperation` search attribute."""

    RESUME = "ResumeActor"
    SUSPEND = "SuspendActor"
    PAUSE = "PauseActor"
    REVERT = "RevertActor"
    GOLDEN_SNAPSHOT = "GoldenSnapshot"
    UPLOAD = "UploadSnapshot"
    FREEZE = "FreezeActor"
    WAKE = "WakeActor"


@dataclass(frozen=True)
class Transition:
    """One operation's row of the actor state table: the states it starts from, the
    transitional state it writes first, and the resting state it ends in.

    `participle` words the refusal ("cannot be resumed from state RUNNING").
    """

    operation: Operation
    sources: frozenset[ActorState]
    via: ActorState
    target: ActorState
    participle: str

    def allows(self, state: str) -> bool:
        """Whether the operation may start from `state` (an ActorState value)."""
        return state in self.sources

    def wanted(self) -> str:
        """The states it starts from in table order, e.g. "SUSPENDED or PAUSED"."""
        ordered = [s.value for s in ActorState if s in self.sources]
        return ordered[0] if len(ordered) == 1 else ", ".join(ordered[:-1]) + " or " + ordered[-1]

    def refusal(self, actor: str, state: str) -> str:
        """The error text for an actor found in a state the operation does not start from.

        Args:
            actor: `<atespace>/<name>`.
            state: the state found.

        Returns:
            e.g. `actor demo/c1 cannot be resumed from state RUNNING (ResumeActor wants SUSPENDED or PAUSED)`.
        """
        refusal = (
            f"actor {actor} cannot be {self.participle} from state {state} "
            f"({self.operation.value} wants {self.wanted()})"
        )
        if state == ActorState.UNREACHABLE:
            atespace, _, name = actor.partition("/")
            refusal += (
                "; its node stopped answering: wait for the node to return (the actor is RUNNING again, its "
                f"memory intact) or go back to its last completed snapshot with 'ate revert actor {name} -a {atespace}'"
            )
        return refusal


TRANSITIONS: dict[Operation, Transition] = {
    t.operation: t
    for t in (
        Transition(
            Operation.RESUME,
            frozenset({ActorState.SUSPENDED, ActorState.PAUSED, ActorState.FROZEN}),
            ActorState.RESUMING,
            ActorState.RUNNING,
            "resumed",
        ),
        Transition(
            Operation.SUSPEND,
            frozenset({ActorState.RUNNING, ActorState.PAUSED, ActorState.FROZEN}),
            ActorState.SUSPENDING,
            ActorState.SUSPENDED,
            "suspended",
        ),
        Transition(
            Operation.PAUSE, frozenset({ActorState.RUNNING, ActorState.FROZEN}), ActorState.PAUSING, ActorState.PAUSED,
            "paused",
        ),
        # A freeze writes FROZEN first (the routers stop sending at its NOTIFY), then stops the sandbox.
        Transition(Operation.FREEZE, frozenset({ActorState.RUNNING}), ActorState.FROZEN, ActorState.FROZEN, "frozen"),
        # A revert also takes over a stuck transitional state, a revert that died (REVERTING),
        # and a SUSPENDED actor whose async upload has not landed (the store checks that one).
        Transition(
            Operation.REVERT,
            frozenset(
                {
                    ActorState.RUNNING,
                    ActorState.FROZEN,
                    ActorState.UNREACHABLE,
                    ActorState.PAUSED,
                    ActorState.CRASHED,
                    ActorState.RESUMING,
                    ActorState.SUSPENDING,
                    ActorState.PAUSING,
                    ActorState.REVERTING,
                }
            ),
            ActorState.REVERTING,
            ActorState.SUSPENDED,
            "reverted",
        ),
    )
}
"""The operations' edges of the actor state table; the store checks every edge against it."""

EVENTS: tuple[tuple[str, str, str], ...] = (
    ("SUSPENDED, its async upload not landed", "RevertActor (drops the local copy, unpins)", "SUSPENDED"),
    ("RUNNING, FROZEN", f"its node sent no heartbeat for the lease (default {NODE_LEASE_SECONDS:g} s)", "UNREACHABLE"),
    (
        "UNREACHABLE",
        f"its node answers again within the grace (default {UNREACHABLE_GRACE_SECONDS:g} s), still running its sandbox",
        "RUNNING (FROZEN if it was)",
    ),
    (
        "UNREACHABLE",
        "the grace passed, its node came back without its sandbox, or its node is known gone (worker pod deleted)",
        "CRASHED",
    ),
    ("RUNNING, FROZEN", "its sandbox exited, its worker pod was deleted, or an eviction deadline passed", "CRASHED"),
    (
        "RUNNING, FROZEN, PAUSED",
        "its idle policy's next step, or a pressure suspend: FreezeActor, PauseActor or SuspendActor, started by ate",
        "FROZEN, PAUSED or SUSPENDED",
    ),
    ("CRASHED, its template says onCrash: Revert", "RevertActor, started by the api-server", "SUSPENDED"),
    ("SUSPENDED", "Delete (any state with --force)", "gone"),
    ("(created)", "Create", "SUSPENDED"),
)
"""Edges that are not operations: (from, what happens, to)."""


def state_table() -> str:
    """The actor state table as Markdown (docs/architecture.md embeds it; a test keeps them equal)."""
    rows = ["| from | operation or event | via | to |", "|---|---|---|---|"]
    for t in TRANSITIONS.values():
        sources = ", ".join(s.value for s in ActorState if s in t.sources)
        rows.append(f"| {sources} | {t.operation.value} | {t.via.value} | {t.target.value} |")
    rows += [f"| {a} | {what} | | {b} |" for a, what, b in EVENTS]
    return "\n".join(rows) + "\n"
