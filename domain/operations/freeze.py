"""FreezeActor's workflow input and result, its steps' inputs, and the atelet's Freeze/Thaw call.

A freeze stops a RUNNING actor's sandbox in place (the hot tier, ARCHITECTURE.md "frozen"): it
keeps its worker and memory and uses no CPU; the next resume thaws it in milliseconds instead of
restoring a snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from domain.refs import ActorRef, WorkerRef


@dataclass
class FreezeActorInput:
    """Input of the FreezeActor workflow.

    Attributes:
        actor: the actor to freeze (RUNNING).
        reason: why ate froze it by itself (`idle for 20 s`); None when asked by a user.
        if_idle: the freeze gives way to traffic: a router replica with a request in flight for
            the actor makes it abandon (the actor stays RUNNING).
    """

    actor: ActorRef
    reason: str | None = None
    if_idle: bool = False


@dataclass
class FreezeActorResult:
    """Result of FreezeActor: frozen now, already frozen, or abandoned because traffic came
    (`abandoned`, the actor RUNNING); step timings in seconds."""

    actor: ActorRef
    already_frozen: bool = False
    abandoned: bool = False
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class BeginFreezeInput:
    """Input of the begin_freeze activity: RUNNING -> FROZEN under this operation (the routers stop
    sending at its NOTIFY), with the reason recorded in the actor's history."""

    actor: ActorRef
    operation_id: str
    reason: str | None = None


@dataclass
class FreezePlan:
    """What begin_freeze decided: nothing to do (already FROZEN), or the worker whose sandbox to stop."""

    already_frozen: bool
    worker: WorkerRef | None = None


@dataclass
class FinishFreezeInput:
    """Input of finish_freeze and rollback_freeze: the operation that holds the actor, and for a
    rollback why (the actor goes back to RUNNING)."""

    actor: ActorRef
    operation_id: str
    error: str | None = None


@dataclass
class AteletFreezeInput:
    """Input of the atelet_freeze and atelet_thaw activities: the worker running the holder."""

    operation_id: str
    worker: WorkerRef
    holder: ActorRef


@dataclass
class AteletFreezeResult:
    """What the atelet did: whether the sandbox changed (False: it was frozen, or running,
    already), the kernel's or QEMU's seconds, and how (`cgroup v1 freezer`, `qmp stop`...)."""

    changed: bool
    seconds: float = 0.0
    method: str = ""
