"""Pydantic models of the REST API: request bodies and responses (the template spec they carry
is `api.template_spec`). Unknown fields in a request are refused, so a typo is an error that
names the field instead of a silently ignored key.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from api.strict import Strict, Tolerant, policy_checked, within_limits
from api.template_spec import TemplateSpec
from domain.documents import printable
from domain.egress import parse_egress_policy
from domain.forks import MAX_FORK_COUNT
from domain.idle import parse_idle_policy
from domain.labels import DNS_LABEL, check_labels, check_selector
from domain.names import check_host_port, check_ip, check_label_name, check_worker_name, shown
from domain.operations.resume import MAX_ROOM_WAIT_SECONDS
from domain.operations.router_drain import MAX_ACTIVE_PER_HEARTBEAT
from domain.quantities import MAX_CPU_MILLIS, MAX_MEMORY_BYTES, WORKER_PLACES, check_worker_places

MAX_WORKERS_PER_NODE = 1000
"""The most workers one node may register."""

MAX_POOL_LABELS = 64
"""The most labels a worker pool may carry."""


NAME = Field(description="a DNS-1123 label", json_schema_extra={"pattern": DNS_LABEL.pattern})
"""A name field (checked by `api.names.check_name`; the pattern is for the OpenAPI document)."""


class TemplateCreate(Strict):
    """POST body of a template."""

    name: str = NAME
    spec: TemplateSpec


class ImagePullPublic(BaseModel):
    """A node's latest report of its pull of one of the template's registry images."""

    node: str
    image: str
    state: Literal["Pulling", "Pulled", "Failed"]
    layers: int = Field(description="the layers of the image's manifest")
    bytes_total: int = Field(description="their sizes as the manifest states them (compressed)")
    bytes_done: int = Field(description="what the node has written of them so far")
    message: str = Field(description="why a Failed pull failed; else ''")
    text: str = Field(description="e.g. '1.2 MiB of 3.3 MiB (2 layers)'")
    updated_at: datetime


class TemplatePublic(BaseModel):
    """A template as the API shows it."""

    atespace: str
    name: str
    spec: dict[str, Any]
    phase: str
    reason: str | None
    golden_snapshot: int | None
    created_at: datetime
    pulls: list[ImagePullPublic] = Field(
        default_factory=list,
        description="while Pending (one template's GET only): the nodes' pulls of its registry images, newest first",
    )


class ImagePullReport(Strict):
    """PUT body of `/v1/nodes/{node}/pulls`: a node's look at its pull of a registry image."""

    image: str = Field(max_length=600, description="the image as its template records it (pinned)")
    state: Literal["Pulling", "Pulled", "Failed"]
    layers: int = Field(ge=0, le=10000)
    bytes_total: int = Field(ge=0)
    bytes_done: int = Field(ge=0)
    message: str = Field(default="", max_length=2000)


class AtespaceCreate(Strict):
    """POST body of an atespace."""

    name: str = NAME


class AtespacePublic(BaseModel):
    """An atespace."""

    name: str
    created_at: datetime


class ActorCreate(Strict):
    """POST body of an actor: from a template (first resume restores its golden snapshot) or
    from a tag `<atespace>/<tag>` (first resume restores the tagged snapshot)."""

    name: str = NAME
    template: str | None = Field(default=None, json_schema_extra={"pattern": DNS_LABEL.pattern})
    from_tag: str | None = Field(default=None, description="<atespace>/<tag>")
    worker_selector: dict[str, str] = Field(default_factory=dict)
    idle: Any = Field(
        default=None,
        description="the actor's own idle policy, over its template's: one step {afterSeconds, action} or a list "
        "of steps (action Freeze, Pause or Suspend, in that order); [] turns idleness off for this actor; unset: "
        "its template's",
    )
    egress: Any = Field(
        default=None,
        description="the actor's own egress policy, within its template's (as a template's egress: allow, "
        "credentials); {} gives it none; unset: its template's",
    )

    @field_validator("egress")
    @classmethod
    def _egress(cls, value: Any) -> Any:
        return egress_document(value)

    @field_validator("idle")
    @classmethod
    def _idle(cls, value: Any) -> Any:
        return idle_document(value)

    @model_validator(mode="after")
    def _source(self) -> ActorCreate:
        if self.template is None and self.from_tag is None:
            raise ValueError("give template (a template name) or from_tag (<atespace>/<tag>)")
        return self

    @field_validator("template")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        return None if value is None else check_label_name(value, "template name")

    @field_validator("from_tag")
    @classmethod
    def _from_tag(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if value.count("/") != 1:
            raise ValueError(f"{shown(value)} must be <atespace>/<tag>")
        atespace, tag = value.split("/")
        check_label_name(atespace, "atespace name")
        check_label_name(tag, "tag name")
        return value

    @field_validator("worker_selector")
    @classmethod
    def _selector(cls, value: dict[str, str]) -> dict[str, str]:
        return check_selector(value)


class ActorUpdate(Strict):
    """PATCH body of an actor: the fields given are replaced, the others kept."""

    worker_selector: dict[str, str] | None = None
    idle: Any = Field(
        default=None,
        description="the actor's own idle policy (as at create); [] turns idleness off for this actor; null: its "
        "template's policy again",
    )
    egress: Any = Field(
        default=None,
        description="the actor's own egress policy (as at create), applied from its next outbound connection; "
        "{} gives it none; null: its template's again",
    )

    @field_validator("egress")
    @classmethod
    def _egress(cls, value: Any) -> Any:
        return egress_document(value)

    @field_validator("worker_selector")
    @classmethod
    def _selector(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            raise ValueError("must be a map of labels (an empty map selects any worker)")
        return check_selector(value)

    @field_validator("idle")
    @classmethod
    def _idle(cls, value: Any) -> Any:
        return idle_document(value)

    @model_validator(mode="after")
    def _something(self) -> ActorUpdate:
        if not self.model_fields_set:
            raise ValueError("give worker_selector, idle or egress (the fields to replace)")
        return self


def idle_document(value: Any) -> list[dict[str, Any]] | None:
    """An idle policy as stored (a list of steps; [] for off), or None when `value` is None.

    Raises:
        PydanticCustomError: the policy is wrong, naming where below the field (`[1].action`).
    """
    return None if value is None else policy_checked(parse_idle_policy, value).document()


def egress_document(value: Any) -> dict[str, Any] | None:
    """An egress policy as stored (`{allow, credentials}`; empty lists: none), or None when
    `value` is None.

    Raises:
        PydanticCustomError: the policy is wrong, naming where below the field (`allow[0].ports`).
    """
    return None if value is None else policy_checked(parse_egress_policy, value).document()


class ResumeRequest(Strict):
    """POST body of a resume (all optional)."""

    timeout_seconds: float | None = Field(default=None, gt=0, le=3600)
    room_wait_seconds: float = Field(
        default=0.0, ge=0, le=MAX_ROOM_WAIT_SECONDS,
        description="How long the resume may wait for a worker with room when none has any (making room by "
        "pressure meanwhile) before it answers 503 NoCapacity; at most the timeout. 0: answer at once.",
    )  # fmt: skip


class RevertRequest(Strict):
    """POST body of a revert (all optional)."""

    timeout_seconds: float | None = Field(default=None, gt=0, le=3600)
    to_generation: int | None = Field(
        default=None, ge=1, strict=True,
        description="Go back to this kept completed generation of the actor's own snapshots (see "
        "`GET .../snapshots?actor=NAME`) instead of its latest; also from SUSPENDED. Unset: its latest completed one.",
    )  # fmt: skip


class SuspendRequest(Strict):
    """POST body of a suspend (all optional)."""

    timeout_seconds: float | None = Field(default=None, gt=0, le=3600)
    mode: Literal["sync", "async"] = "sync"


class PauseRequest(Strict):
    """POST body of a pause (all optional)."""

    timeout_seconds: float | None = Field(default=None, gt=0, le=3600)


class WorkerOfActor(BaseModel):
    """Where an actor runs."""

    pool: str
    name: str
    node: str
    ip: str


class SnapshotOfActor(BaseModel):
    """An actor's latest COMPLETED snapshot."""

    generation: int
    scope: str
    uri: str
    state: str


class ActorPublic(BaseModel):
    """An actor as the API shows it."""

    atespace: str
    name: str
    template: str
    state: str
    version: int
    worker_selector: dict[str, str]
    worker: WorkerOfActor | None
    latest_snapshot: SnapshotOfActor | None
    pinned_node: str | None = None
    local_snapshot: SnapshotOfActor | None = None
    upload_pending: bool = False
    operation: str | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    idle: IdleOfActor | None = None
    """Its idle policy and where it stands (None when neither it nor its template has one)."""
    egress: dict[str, Any] | None = Field(
        default=None, description="its own egress policy {allow, credentials}; null: its template's applies"
    )


class IdleStepOfActor(BaseModel):
    """One step of an idle policy."""

    afterSeconds: float  # noqa: N815 - as the template writes it
    action: Literal["Freeze", "Pause", "Suspend"]


class IdleOfActor(BaseModel):
    """An actor's idle policy in force and where it stands."""

    policy: list[IdleStepOfActor]
    source: Literal["actor", "template"]
    idle_seconds: float | None = Field(description="seconds without traffic through any router replica (RUNNING, "
                                       "FROZEN or PAUSED actors; None otherwise)")
    next_action: Literal["Freeze", "Pause", "Suspend"] | None = None
    next_action_in_seconds: float | None = Field(default=None, description="0 when due now")


class ActorList(BaseModel):
    """One page of actors."""

    items: list[ActorPublic]
    next_page_token: str | None


class ActorRefBody(Strict):
    """(atespace, name) of an actor."""

    atespace: str
    name: str

    @field_validator("atespace", "name")
    @classmethod
    def _names(cls, value: str, info: ValidationInfo) -> str:
        return check_label_name(value, f"{info.field_name} name")


class WorkerRegistrationBody(Tolerant):
    """One worker in an atelet's registration (unknown fields ignored: atelets may be newer)."""

    name: str = Field(
        description="the worker's name on its node, a DNS-1123 subdomain (`<pool>-<i>`)",
        json_schema_extra={"pattern": r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"},
    )
    pool: str = Field(description="its worker pool, a DNS-1123 label", json_schema_extra={"pattern": DNS_LABEL.pattern})
    ip: str = Field(description="its IP address", json_schema_extra={"anyOf": [{"format": "ipv4"}, {"format": "ipv6"}]})
    sandbox_class: Literal["gvisor", "microvm"] = "gvisor"
    labels: dict[str, str] = Field(default_factory=dict)
    places: int = Field(
        default=WORKER_PLACES,
        description="actors it hosts at once: always 1 (a worker is one sandbox with one address)",
        json_schema_extra={"enum": [WORKER_PLACES]},
    )
    cpu_millis: int = Field(gt=0, le=MAX_CPU_MILLIS)
    memory_bytes: int = Field(gt=0, le=MAX_MEMORY_BYTES)
    runtime_version: str = Field(
        default="",
        max_length=1000,
        description="the runtime that restores its memory snapshots (placement check 4): a runsc build, or the "
        "VMM's version, machine type, accelerator and device kinds (a microvm one is ~170 characters); empty: a "
        "gvisor worker's is the node's runsc_version",
    )
    actor: ActorRefBody | None = None
    sandbox_state: Literal["idle", "running", "exited"] | None = Field(
        default=None, description="how `actor`'s sandbox is: running, or exited on its own (still there, stopped)"
    )
    egress_active: bool = Field(
        default=False,
        description="`actor` had outbound traffic through the node's egress proxy since the last heartbeat, or "
        "has some in flight: its last_active_at becomes now (if it is placed on this worker)",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_worker_name(value)

    @field_validator("pool")
    @classmethod
    def _pool(cls, value: str) -> str:
        return check_label_name(value, "pool name")

    @field_validator("places", mode="before")
    @classmethod
    def _places(cls, value: object) -> int:
        return check_worker_places(value)

    @field_validator("ip")
    @classmethod
    def _ip(cls, value: str) -> str:
        return check_ip(value)

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_POOL_LABELS:
            raise ValueError(f"has {len(value)} labels; at most {MAX_POOL_LABELS} are allowed")
        return check_labels(value)


class NodeRegistration(Tolerant):
    """PUT body of a node: an atelet's registration and heartbeat (unknown fields ignored)."""

    address: str = Field(
        description="host:port of the node's atelet",
        json_schema_extra={"pattern": r"^([A-Za-z0-9][-A-Za-z0-9.]*|\[[0-9a-fA-F:.]+\]):[0-9]{1,5}$"},
    )
    runsc_version: str = Field(default="", max_length=200)
    workers: list[WorkerRegistrationBody] = Field(max_length=MAX_WORKERS_PER_NODE)

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        return check_host_port(value)

    @field_validator("workers")
    @classmethod
    def _unique(cls, value: list[WorkerRegistrationBody]) -> list[WorkerRegistrationBody]:
        names = [w.name for w in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"worker names must be unique on a node; {', '.join(twice)} appear more than once")
        return value


class RouterHeartbeat(Tolerant):
    """PUT body of a router replica: its registration and heartbeat (unknown fields ignored)."""

    lease_seconds: float = Field(
        default=10.0, ge=1.0, le=300.0, description="how long the replica counts as live after this heartbeat"
    )
    drain_timeout_seconds: float = Field(
        default=10.0,
        ge=0.0,
        le=240.0,
        description="how long it lets requests in flight finish when told to drain an actor",
    )
    active: list[str] = Field(
        default_factory=list,
        max_length=MAX_ACTIVE_PER_HEARTBEAT,
        description="actors (`<atespace>/<name>`) with traffic on the replica since its last heartbeat: a "
        "request started, ended or in flight, bytes moved; their last_active_at becomes now. A replica "
        f"with more than {MAX_ACTIVE_PER_HEARTBEAT} sends the rest in further heartbeats right after",
    )

    @field_validator("active")
    @classmethod
    def _actor_keys(cls, values: list[str]) -> list[str]:
        for value in values:
            atespace, slash, name = value.partition("/") if isinstance(value, str) else ("", "", "")
            if not slash or not DNS_LABEL.fullmatch(atespace) or not DNS_LABEL.fullmatch(name):
                raise ValueError(f"active: {shown(value)} is not an actor key <atespace>/<name> of two DNS labels")
        return values


class RouterDrainPublic(BaseModel):
    """A drain a router replica must carry out, then acknowledge (`if_idle`: an idle action's,
    which the replica refuses, acknowledging it busy, while a request of the actor is in flight)."""

    id: int
    atespace: str
    name: str
    if_idle: bool = False


class RouterDrainAck(Tolerant):
    """Optional POST body of a drain's acknowledgement."""

    busy: bool = Field(
        default=False,
        description="the replica refused an if-idle drain: a request of the actor is in flight there (nothing drained)",
    )


class RouterReplicaPublic(BaseModel):
    """A registered router replica; `live` while its lease runs."""

    name: str
    started_at: datetime
    last_seen_at: datetime
    lease_seconds: float
    drain_timeout_seconds: float
    live: bool


class WorkerPublic(BaseModel):
    """A worker as the API shows it."""

    pool: str
    name: str
    node: str
    ip: str
    sandbox_class: str
    labels: dict[str, str]
    state: str
    state_reason: str | None = None
    """Why an UNAVAILABLE worker takes no actor (fenced, node lost, draining, pod not Ready,
    held for the routers' drain of a crashed actor); None when ACTIVE."""
    places: int
    used_places: int
    cpu_millis: int
    memory_bytes: int
    actors: list[str]


class ForkCreate(Strict):
    """POST body of a fork: new actors that start from the source actor's snapshot, sharing its
    files until their own first suspend."""

    name: str = Field(
        description="a DNS-1123 label: the new actor's name, or with count the stem of NAME-1..NAME-count",
        json_schema_extra={"pattern": DNS_LABEL.pattern},
    )
    generation: int | None = Field(
        default=None, ge=1, strict=True,
        description="a kept completed generation of the source's own snapshots; unset: its latest completed one",
    )  # fmt: skip
    count: int | None = Field(
        default=None, ge=1, le=MAX_FORK_COUNT, strict=True,
        description=f"create count actors named NAME-1..NAME-count (at most {MAX_FORK_COUNT}); unset: one named NAME",
    )  # fmt: skip


class ForkList(BaseModel):
    """The actors a fork created, in name order (NAME-1 first)."""

    items: list[ActorPublic]


class TagCreate(Strict):
    """POST body of a tag."""

    tag: str = NAME


class TagPublic(BaseModel):
    """A tag: a named pointer to a COMPLETED snapshot."""

    atespace: str
    name: str
    source_actor: str
    generation: int
    scope: str
    created_at: datetime


class OperationPublic(BaseModel):
    """One operation of an actor (past or running)."""

    operation_id: str
    operation: str
    outcome: str | None
    worker: str | None
    error: str | None
    started_at: datetime
    finished_at: datetime | None
    duration_seconds: float | None
    reason: str | None = Field(default=None, description="why ate started it by itself (idle for 300 s); of an "
                               "exec (ExecInActor), who ran what (by alice: cat /data/count.txt); null: a user or "
                               "an operator asked")


class RunningOperation(BaseModel):
    """An operation in flight, from Temporal's visibility store."""

    workflow_id: str
    operation: str
    atespace: str | None
    actor: str | None
    started_at: datetime | None
    step: str | None


MAX_REASON = 2000
"""The longest exit reason kept (it ends with the sandbox's last log line)."""


class NodeEvent(Strict):
    """An atelet's report about a sandbox (so far: it exited on its own). The reason carries the
    sandbox's own last log line, written by untrusted code: it is made printable and cut to
    MAX_REASON characters rather than refused, so the report is never lost."""

    worker: str
    actor: ActorRefBody
    event: Literal["exited"]
    reason: str = ""

    @model_validator(mode="before")
    @classmethod
    def _within_limits(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("reason"), str):
            data = {**data, "reason": printable(data["reason"][: MAX_REASON * 2], MAX_REASON)}
        return within_limits(data)

    @field_validator("worker")
    @classmethod
    def _worker(cls, value: str) -> str:
        return check_worker_name(value)


class DrainRequest(Strict):
    """POST body of a node drain."""

    deadline_seconds: float = Field(default=1800.0, gt=0, le=7 * 24 * 3600)
