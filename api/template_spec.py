"""The actor template spec as the REST API validates it (pydantic), in the YAML's camelCase field
names. Unknown fields are refused everywhere, so a typo is an error that names the field instead
of a silently ignored key. What passes is stored as a document and read back as
`domain.templates.ActorTemplateSpec`.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from api.strict import Strict, policy_checked
from domain.egress import parse_egress_policy
from domain.idle import parse_idle_policy, parse_pressure_policy
from domain.image_references import is_registry_reference, parse_registry_image
from domain.labels import DNS_LABEL, check_selector
from domain.locations import check_storage_location
from domain.names import shown
from domain.quantities import parse_cpu_millis, parse_memory_bytes
from domain.registry_credentials import MAX_IMAGE_PULL_SECRETS
from domain.templates import RETAIN_GENERATIONS_DEFAULT, RETAIN_GENERATIONS_MAX

_LABEL = DNS_LABEL.pattern
_OCI_IMAGE = re.compile(r"^oci:(?P<path>[^:\s]+):(?P<tag>[A-Za-z0-9_][A-Za-z0-9._-]{0,127})$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
"""Kubernetes' rule for environment variable names."""


def _printable_path(value: str) -> str:
    if any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError(f"{shown(value)} must not contain spaces or control characters")
    return value


class HttpGet(Strict):
    """An HTTP GET probe: 200 from `path` on `port` means ready."""

    path: str = "/"
    port: int = Field(ge=1, le=65535, description="TCP port, 1-65535")

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must start with '/'")
        return _printable_path(value)


class WakeupProbe(Strict):
    """When a resumed or booted container counts as awake."""

    httpGet: HttpGet  # noqa: N815 - the YAML's field name


class HttpPost(HttpGet):
    """An HTTP POST ate makes to `path` on `port` of the container."""


class PostRestore(Strict):
    """Called after every restore, before traffic is let in."""

    httpPost: HttpPost  # noqa: N815 - the YAML's field name


class Lifecycle(Strict):
    """Calls ate makes to a container at points of its life (as Kubernetes' container lifecycle hooks)."""

    postRestore: PostRestore = Field(  # noqa: N815
        description="after every restore (a resume, a fork's or a new actor's first resume), once the wakeup probe "
        "answered and before any traffic: ate POSTs JSON {actor, source, generation, forked, suspended_at, "
        "suspended_seconds, restored_at} here; an answer other than 2xx within 10 s fails the resume (nothing is let in)",
    )


class VolumeMount(Strict):
    """Mount of a declared volume into a container."""

    name: str = Field(pattern=_LABEL)
    mountPath: str  # noqa: N815

    @field_validator("mountPath")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or ".." in value.split("/"):
            raise ValueError("must be an absolute path without '..'")
        return _printable_path(value)


class Container(Strict):
    """One container of an actor."""

    name: str = Field(pattern=_LABEL)
    image: str = Field(
        description="a registry image by tag or digest (registry.example.com/team/agent:v3, ...@sha256:<hex>; "
        "pinned to its digest when the template is created) or oci:<path>:<tag> (a local OCI image layout)",
        min_length=1, max_length=512,
    )  # fmt: skip
    command: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    port: int | None = Field(default=None, ge=1, le=65535, description="port the router sends traffic to")
    wakeupProbe: WakeupProbe | None = None  # noqa: N815
    volumeMounts: list[VolumeMount] = Field(default_factory=list)  # noqa: N815
    lifecycle: Lifecycle | None = None

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        if is_registry_reference(value):
            try:
                parse_registry_image(value)
            except ValueError as error:
                raise ValueError(f"{error}; or a local OCI image layout 'oci:<path>:<tag>'") from None
            return value
        match = _OCI_IMAGE.fullmatch(value)
        if not match:
            raise ValueError(
                "must be a local OCI image layout 'oci:<path>:<tag>', e.g. oci:examples/counter/oci:latest, "
                "or a registry image such as registry.example.com/team/agent:v3"
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

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _ENV_NAME.match(name):
                raise ValueError(
                    f"{shown(name)} is not an environment variable name: use letters, digits, '_', '-' or '.', "
                    "not starting with a digit (e.g. DATA_DIR)"
                )
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
    retainGenerations: int = Field(  # noqa: N815
        default=RETAIN_GENERATIONS_DEFAULT, ge=1, le=RETAIN_GENERATIONS_MAX, strict=True,
        description="how many completed generations of each actor are kept (the latest counts as one); older ones "
        "that no tag or fork keeps are deleted. `ate revert actor NAME --to-generation G` goes back to any kept one",
    )  # fmt: skip

    @field_validator("onPause", "onCommit", mode="before")
    @classmethod
    def _scope(cls, value: Any) -> Any:
        if isinstance(value, str) and value.lower() in ("full", "data"):
            return value.capitalize()
        return value

    @field_validator("storageLocation")
    @classmethod
    def _location(cls, value: str | None) -> str | None:
        return None if value is None else check_storage_location(value)

    @model_validator(mode="after")
    def _commit_within_pause(self) -> SnapshotConfig:
        if self.onPause == "Data" and self.onCommit == "Full":
            raise ValueError("onCommit scope must be within onPause scope: onCommit Full needs onPause Full")
        return self


class LocalObjectReference(Strict):
    """A secret of the template's atespace, by name (Kubernetes' LocalObjectReference)."""

    name: str = Field(pattern=_LABEL, description="a secret of type registry in the template's atespace")


class Access(Strict):
    """Who the router lets reach the template's actors (domain.templates.ActorAccess)."""

    mode: Literal["public", "token"] = "public"
    passCredential: bool = False  # noqa: N815


class TemplateSpec(Strict):
    """An actor template's spec (ARCHITECTURE.md, "actor template")."""

    sandboxClass: Literal["gvisor", "microvm"] = "gvisor"  # noqa: N815
    workerSelector: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    containers: list[Container] = Field(min_length=1, max_length=10)
    imagePullSecrets: list[LocalObjectReference] | None = Field(  # noqa: N815
        default=None, max_length=MAX_IMAGE_PULL_SECRETS,
        description="registry secrets (ate create secret NAME --type registry ...) the containers' registry images "
        "are pulled with: for each image, those for its registry, in order; none for a registry: pulled anonymously",
    )
    resources: Resources = Field(default_factory=Resources)
    volumes: list[Volume] = Field(default_factory=list)
    snapshotConfig: SnapshotConfig = Field(default_factory=SnapshotConfig)  # noqa: N815
    access: Access = Field(default_factory=Access)
    onCrash: Literal["Revert"] | None = Field(  # noqa: N815
        default=None,
        description="what ate does by itself with a CRASHED actor: Revert (back to its last completed snapshot; "
        "it resumes at its next request); unset: nothing",
    )

    idle: Any = Field(
        default=None,
        description="idle policy: one step {afterSeconds, action} or a list of steps in increasing time; action "
        "Freeze, Pause or Suspend, in that order, each at most once; unset: off",
        json_schema_extra={"examples": [{"afterSeconds": 300, "action": "Suspend"},
                                        [{"afterSeconds": 20, "action": "Freeze"},
                                         {"afterSeconds": 600, "action": "Suspend"}]]},
    )  # fmt: skip
    suspendUnderPressure: Any = Field(  # noqa: N815
        default=None,
        description="true, or {action: Suspend|Pause, minimumRunSeconds}: ate may suspend (or pause) these actors "
        "to make room when a resume finds none (frozen ones first, then the longest idle)",
    )

    egress: Any = Field(
        default=None,
        description="where the actors may connect out to, through their node's egress proxy: allow [{host (exact, "
        "or *.domain: any name ending in .domain, never domain itself) | cidr, ports}], credentials [{host (exact, "
        "allowed by a rule), header, secret (a secret of the atespace)}] (the proxy adds the header with the "
        "secret's value; the actor never holds it); unset: no egress",
        json_schema_extra={"examples": [{"allow": [{"host": "api.example.com", "ports": [443]},
                                                   {"cidr": "10.20.0.0/16", "ports": [5432]}],
                                         "credentials": [{"host": "api.example.com", "header": "x-api-key",
                                                          "secret": "model-key"}]}]},
    )  # fmt: skip

    @field_validator("workerSelector")
    @classmethod
    def _selector(cls, value: dict[str, str]) -> dict[str, str]:
        return check_selector(value)

    @field_validator("egress")
    @classmethod
    def _egress(cls, value: Any) -> Any:
        policy = policy_checked(parse_egress_policy, value)
        return None if policy.off else policy.document()

    @field_validator("idle")
    @classmethod
    def _idle(cls, value: Any) -> Any:
        policy = policy_checked(parse_idle_policy, value)
        return None if policy.off else policy.document()

    @field_validator("suspendUnderPressure")
    @classmethod
    def _pressure(cls, value: Any) -> Any:
        pressure = policy_checked(parse_pressure_policy, value)
        return pressure.document() if pressure.enabled else None

    @model_validator(mode="after")
    def _references(self) -> TemplateSpec:
        names = [c.name for c in self.containers]
        if len(set(names)) != len(names):
            raise ValueError(f"container names must be unique, got {names}")
        pulls = [p.name for p in self.imagePullSecrets or []]
        if len(set(pulls)) != len(pulls):
            raise ValueError(f"imagePullSecrets: names must be unique, got {pulls}")
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
        return self
