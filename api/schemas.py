"""Pydantic models of the REST API: request bodies, the actor template spec, responses.

The template spec uses the YAML's camelCase field names. Unknown fields are refused
everywhere, so a typo is an error that names the field instead of a silently ignored key.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from domain.labels import check_selector
from domain.quantities import parse_cpu_millis, parse_memory_bytes

_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_OCI_IMAGE = re.compile(r"^oci:(?P<path>[^:]+):(?P<tag>[A-Za-z0-9_][A-Za-z0-9._-]{0,127})$")


class Strict(BaseModel):
    """Base: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class HttpGet(Strict):
    """An HTTP GET probe: 200 from `path` on `port` means ready."""

    path: str = "/"
    port: int = Field(ge=1, le=65535, description="TCP port, 1-65535")

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must start with '/'")
        return value


class WakeupProbe(Strict):
    """When a resumed or booted container counts as awake."""

    httpGet: HttpGet  # noqa: N815 - the YAML's field name


class VolumeMount(Strict):
    """Mount of a declared volume into a container."""

    name: str = Field(pattern=_LABEL)
    mountPath: str  # noqa: N815

    @field_validator("mountPath")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or ".." in value.split("/"):
            raise ValueError("must be an absolute path without '..'")
        return value


class Container(Strict):
    """One container of an actor."""

    name: str = Field(pattern=_LABEL)
    image: str = Field(description="oci:<path>:<tag> (a local OCI image layout)")
    command: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    port: int | None = Field(default=None, ge=1, le=65535, description="port the router sends traffic to")
    wakeupProbe: WakeupProbe | None = None  # noqa: N815
    volumeMounts: list[VolumeMount] = Field(default_factory=list)  # noqa: N815

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        match = _OCI_IMAGE.match(value)
        if not match:
            raise ValueError(
                "must be a local OCI image layout 'oci:<path>:<tag>', e.g. oci:examples/counter/oci:latest"
            )
        if match.group("path").startswith("/") or ".." in match.group("path").split("/"):
            raise ValueError("the image path must be relative to the atelet's image root, without '..'")
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: Any) -> Any:
        if isinstance(value, list):  # Kubernetes style [{name, value}]
            return {str(item.get("name")): str(item.get("value", "")) for item in value if isinstance(item, dict)}
        if isinstance(value, dict):
            return {str(k): str(v) for k, v in value.items()}
        return value


class Limits(Strict):
    """Resource limits reserved on a worker: cpu ("500m", "1") and memory ("256Mi")."""

    cpu: str | None = None
    memory: str | None = None

    @field_validator("cpu", mode="before")
    @classmethod
    def _cpu(cls, value: Any) -> Any:
        if value is None:
            return None
        parse_cpu_millis(value)
        return str(value)

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> Any:
        if value is None:
            return None
        parse_memory_bytes(value)
        return str(value)


class Resources(Strict):
    """Resources of an actor."""

    limits: Limits = Field(default_factory=Limits)


class Volume(Strict):
    """A volume; `durableDir: {}` marks a directory kept in every snapshot scope."""

    name: str = Field(pattern=_LABEL)
    durableDir: dict[str, Any] | None = None  # noqa: N815

    @model_validator(mode="after")
    def _kind(self) -> Volume:
        if self.durableDir is None:
            raise ValueError("a volume needs a kind: durableDir: {}")
        if self.durableDir:
            raise ValueError("durableDir takes no options: write durableDir: {}")
        return self


Scope = Literal["Full", "Data"]


class SnapshotConfig(Strict):
    """Snapshot scopes (Full: memory too; Data: durable dirs only) and where snapshots are stored."""

    onPause: Scope = "Full"  # noqa: N815
    onCommit: Scope = "Full"  # noqa: N815
    storageLocation: str | None = None  # noqa: N815

    @field_validator("onPause", "onCommit", mode="before")
    @classmethod
    def _scope(cls, value: Any) -> Any:
        if isinstance(value, str) and value.lower() in ("full", "data"):
            return value.capitalize()
        return value

    @field_validator("storageLocation")
    @classmethod
    def _location(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.startswith("file:///"):
            raise ValueError("only file:///<absolute path> locations are supported by this build")
        if ".." in value.split("/"):
            raise ValueError("must not contain '..'")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _commit_within_pause(self) -> SnapshotConfig:
        if self.onPause == "Data" and self.onCommit == "Full":
            raise ValueError("onCommit scope must be within onPause scope: onCommit Full needs onPause Full")
        return self


class TemplateSpec(Strict):
    """An actor template's spec (ARCHITECTURE.md, "actor template")."""

    sandboxClass: Literal["gvisor", "microvm"] = "gvisor"  # noqa: N815
    workerSelector: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    containers: list[Container] = Field(min_length=1, max_length=10)
    resources: Resources = Field(default_factory=Resources)
    volumes: list[Volume] = Field(default_factory=list)
    snapshotConfig: SnapshotConfig = Field(default_factory=SnapshotConfig)  # noqa: N815

    @field_validator("workerSelector")
    @classmethod
    def _selector(cls, value: dict[str, str]) -> dict[str, str]:
        return check_selector(value)

    @model_validator(mode="after")
    def _references(self) -> TemplateSpec:
        names = [c.name for c in self.containers]
        if len(set(names)) != len(names):
            raise ValueError(f"container names must be unique, got {names}")
        volumes = {v.name for v in self.volumes}
        if len(volumes) != len(self.volumes):
            raise ValueError("volume names must be unique")
        for i, container in enumerate(self.containers):
            for mount in container.volumeMounts:
                if mount.name not in volumes:
                    declared = sorted(volumes) or "none"
                    raise ValueError(
                        f"containers[{i}].volumeMounts: {mount.name!r} names no declared volume (declared: {declared})"
                    )
        first = self.containers[0]
        if first.port is None and first.wakeupProbe is None:
            raise ValueError(
                "containers[0].port: required when containers[0] has no wakeupProbe (the router sends "
                "traffic to containers[0].port, else to its wakeup probe's port)"
            )
        if self.sandboxClass == "microvm":
            raise ValueError("sandboxClass microvm cannot run on this build's workers; use gvisor")
        return self


class TemplateCreate(Strict):
    """POST body of a template."""

    name: str
    spec: TemplateSpec


class TemplatePublic(BaseModel):
    """A template as the API shows it."""

    atespace: str
    name: str
    spec: dict[str, Any]
    phase: str
    reason: str | None
    golden_snapshot: int | None
    created_at: datetime


class AtespaceCreate(Strict):
    """POST body of an atespace."""

    name: str


class AtespacePublic(BaseModel):
    """An atespace."""

    name: str
    created_at: datetime


class ActorCreate(Strict):
    """POST body of an actor: from a template (first resume restores its golden snapshot) or
    from a tag `<atespace>/<tag>` (first resume restores the tagged snapshot)."""

    name: str
    template: str | None = None
    from_tag: str | None = Field(default=None, description="<atespace>/<tag>")
    worker_selector: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _source(self) -> ActorCreate:
        if self.template is None and self.from_tag is None:
            raise ValueError("give template (a template name) or from_tag (<atespace>/<tag>)")
        if self.from_tag is not None and self.from_tag.count("/") != 1:
            raise ValueError(f"from_tag {self.from_tag!r} must be <atespace>/<tag>")
        return self

    @field_validator("worker_selector")
    @classmethod
    def _selector(cls, value: dict[str, str]) -> dict[str, str]:
        return check_selector(value)


class ActorUpdate(Strict):
    """PATCH body of an actor."""

    worker_selector: dict[str, str]

    @field_validator("worker_selector")
    @classmethod
    def _selector(cls, value: dict[str, str]) -> dict[str, str]:
        return check_selector(value)


class ResumeRequest(Strict):
    """POST body of a resume (all optional)."""

    timeout_seconds: float | None = Field(default=None, gt=0, le=3600)


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


class ActorList(BaseModel):
    """One page of actors."""

    items: list[ActorPublic]
    next_page_token: str | None


class ActorRefBody(Strict):
    """(atespace, name) of an actor."""

    atespace: str
    name: str


class WorkerRegistrationBody(BaseModel):
    """One worker in an atelet's registration (unknown fields ignored: atelets may be newer)."""

    name: str
    pool: str
    ip: str
    sandbox_class: Literal["gvisor", "microvm"] = "gvisor"
    labels: dict[str, str] = Field(default_factory=dict)
    places: int = Field(default=1, ge=1)
    cpu_millis: int = Field(gt=0)
    memory_bytes: int = Field(gt=0)
    actor: ActorRefBody | None = None


class NodeRegistration(BaseModel):
    """PUT body of a node: an atelet's registration and heartbeat (unknown fields ignored)."""

    address: str
    runsc_version: str = ""
    workers: list[WorkerRegistrationBody]


class WorkerPublic(BaseModel):
    """A worker as the API shows it."""

    pool: str
    name: str
    node: str
    ip: str
    sandbox_class: str
    labels: dict[str, str]
    state: str
    places: int
    used_places: int
    cpu_millis: int
    memory_bytes: int
    actors: list[str]


class TagCreate(Strict):
    """POST body of a tag."""

    tag: str


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


class RunningOperation(BaseModel):
    """An operation in flight, from Temporal's visibility store."""

    workflow_id: str
    operation: str
    atespace: str | None
    actor: str | None
    started_at: datetime | None
    step: str | None


class NodeEvent(Strict):
    """An atelet's report about a sandbox (so far: it exited on its own)."""

    worker: str
    actor: ActorRefBody
    event: Literal["exited"]
    reason: str = ""


class DrainRequest(Strict):
    """POST body of a node drain."""

    deadline_seconds: float = Field(default=1800.0, gt=0, le=7 * 24 * 3600)
