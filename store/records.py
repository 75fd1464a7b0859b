"""Rows of the store as plain dataclasses (what `Store` returns to the API and activities)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

from domain.egress import EgressPolicy, parse_egress_policy
from domain.idle import IdlePolicy, parse_idle_policy
from domain.templates import ActorTemplateSpec


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def spec_of(row: asyncpg.Record) -> ActorTemplateSpec:
    """The typed template spec of a row that carries the stored document as `spec`."""
    return ActorTemplateSpec.from_document(_json(row["spec"]))


@dataclass
class AtespaceRecord:
    """An atespace."""

    name: str
    created_at: datetime


@dataclass
class TemplateRecord:
    """An actor template; phase Pending | Ready | Failed (reason set when Failed)."""

    atespace: str
    name: str
    spec: ActorTemplateSpec
    phase: str
    reason: str | None
    golden_snapshot_id: int | None
    created_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> TemplateRecord:
        """Build from a row of `get_template`/`list_templates`."""
        return cls(
            atespace=row["atespace"],
            name=row["name"],
            spec=spec_of(row),
            phase=row["phase"],
            reason=row["reason"],
            golden_snapshot_id=row["golden_snapshot_id"],
            created_at=row["created_at"],
        )


@dataclass
class ActorWorker:
    """The worker an actor is bound to."""

    worker_id: int
    pool: str
    name: str
    node: str
    ip: str
    atelet_address: str | None


@dataclass
class ActorSnapshot:
    """An actor's latest COMPLETED snapshot."""

    snapshot_id: int
    generation: int
    scope: str
    uri: str
    state: str


@dataclass
class ActorRecord:
    """An actor with its worker (when bound) and latest snapshot (when any)."""

    atespace: str
    name: str
    template: str
    state: str
    version: int
    worker_selector: dict[str, str]
    operation: str | None
    operation_id: str | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    worker: ActorWorker | None
    latest_snapshot: ActorSnapshot | None
    pinned_node: str | None = None
    """The node holding the actor's local (paused) snapshot, which its next resume goes to."""
    local_snapshot: ActorSnapshot | None = None
    """A PAUSED actor's LOCAL snapshot, or an async suspend's not uploaded yet (on `pinned_node` only)."""
    upload_pending: bool = False
    """Whether `local_snapshot` is an async suspend's checkpoint whose upload has not landed."""
    idle_policy: IdlePolicy = field(default_factory=IdlePolicy)
    """The idle policy in force: the actor's own, else its template's (`idle_source` says which)."""
    idle_source: str = "off"
    """`actor` (its own policy, set at create or later), `template`, or `off` (neither has one)."""
    idle_seconds: float | None = None
    """Seconds since the last traffic any router replica reported, or since its last resume."""
    egress_policy: EgressPolicy | None = None
    """The actor's own egress policy (within its template's), or None: its template's applies."""

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> ActorRecord:
        """Build from a row of `get_actor`/`list_actors`."""
        worker = None
        if row["worker_id"] is not None:
            worker = ActorWorker(
                worker_id=row["worker_id"],
                pool=row["worker_pool"],
                name=row["worker_name"],
                node=row["worker_node"],
                ip=row["worker_ip"],
                atelet_address=row["atelet_address"],
            )
        snapshot = None
        if row["snapshot_id"] is not None:
            snapshot = ActorSnapshot(
                snapshot_id=row["snapshot_id"],
                generation=row["snapshot_generation"],
                scope=row["snapshot_scope"],
                uri=row["snapshot_uri"],
                state=row["snapshot_state"],
            )
        return cls(
            atespace=row["atespace"],
            name=row["name"],
            template=row["template"],
            state=row["state"],
            version=row["version"],
            worker_selector=_json(row["worker_selector"]),
            operation=row["operation"],
            operation_id=row["operation_id"],
            last_error=row["last_error"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            worker=worker,
            latest_snapshot=snapshot,
            pinned_node=row["pinned_node"],
            local_snapshot=ActorSnapshot(
                snapshot_id=row["local_snapshot_id"],
                generation=row["local_snapshot_generation"],
                scope=row["local_snapshot_scope"],
                uri=row["local_snapshot_uri"],
                state="COMPLETED",
            )
            if row["local_snapshot_id"] is not None
            else None,
            upload_pending=bool(row["upload_pending"]),
            **_idleness(row),
            egress_policy=_egress(row),
        )


def _egress(row: asyncpg.Record) -> EgressPolicy | None:
    """The actor's own egress policy from its row, or None."""
    own = _json(row["egress_policy"])
    return None if own is None else parse_egress_policy(own)


def _idleness(row: asyncpg.Record) -> dict[str, Any]:
    """The idle fields of an actor row: its policy in force and where it comes from."""
    own, inherited = _json(row["idle_policy"]), _json(row["template_idle"])
    try:
        if own is not None:
            policy, source = parse_idle_policy(own), "actor"
        else:
            policy, source = parse_idle_policy(inherited), "template"
    except ValueError:  # never for a document the API validated
        policy, source = IdlePolicy(), "off"
    if policy.off and own is None:
        source = "off"
    return {"idle_policy": policy, "idle_source": source, "idle_seconds": row["idle_seconds"]}


@dataclass
class WorkerRecord:
    """A worker with its usage: holders are placement holder keys (`actor/<a>/<n>`...)."""

    worker_id: int
    node: str
    name: str
    pool: str
    ip: str
    sandbox_class: str
    labels: dict[str, str]
    state: str
    state_reason: str | None
    places: int
    cpu_millis: int
    memory_bytes: int
    atelet_address: str
    holders: list[str]
    used_cpu_millis: int
    used_memory_bytes: int

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> WorkerRecord:
        """Build from a row of `list_workers`."""
        return cls(
            worker_id=row["id"],
            node=row["node"],
            name=row["name"],
            pool=row["pool"],
            ip=row["ip"],
            sandbox_class=row["sandbox_class"],
            labels=_json(row["labels"]),
            state=row["state"],
            state_reason=row["state_reason"],
            places=row["places"],
            cpu_millis=row["cpu_millis"],
            memory_bytes=row["memory_bytes"],
            atelet_address=row["atelet_address"],
            holders=list(row["holders"]),
            used_cpu_millis=int(row["used_cpu"]),
            used_memory_bytes=int(row["used_memory"]),
        )


@dataclass
class WorkerRegistration:
    """A worker as an atelet reports it.

    `runtime_version` is the runtime that restores its memory snapshots (placement check 4): a
    runsc build for gVisor, the VMM's version, machine type and accelerator for microvm; '' when
    the atelet does not say (an older one, the pod syncer): its node's runsc build stands in.
    """

    name: str
    pool: str
    ip: str
    sandbox_class: str
    labels: dict[str, str]
    places: int
    cpu_millis: int
    memory_bytes: int
    runtime_version: str = ""


@dataclass
class OperationRecord:
    """One past or running operation of an actor."""

    operation_id: str
    operation: str
    outcome: str | None
    worker: str | None
    error: str | None
    started_at: datetime
    finished_at: datetime | None
    reason: str | None = None
    """Why ate started it by itself (`idle for 300 s`, a pressure suspend); None when a user asked."""


@dataclass
class TagRecord:
    """A tag: a named pointer to a COMPLETED snapshot."""

    atespace: str
    name: str
    snapshot_id: int
    source_actor: str
    generation: int
    scope: str
    created_at: datetime
    template: str | None = None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> TagRecord:
        """Build from a row of `get_tag`/`list_tags`."""
        values: dict[str, Any] = dict(row)
        values.pop("uri", None)
        return cls(**values)
