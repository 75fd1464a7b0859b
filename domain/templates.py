"""The actor template spec as a type: parsed once at the edge, passed typed everywhere after.

The REST API validates a template's YAML/JSON document (camelCase, as users write it) with its
pydantic schema and stores the validated document; `ActorTemplateSpec.from_document` turns a
stored document into this type (the store does it when it reads a template), and `document`
turns it back (what the API shows). Placement reads `sandbox_class`, `worker_selector` and the
limits in millicores and bytes; the atelet call is built from `containers` and `volumes`; the
router reads `serving_port`; snapshots take `snapshot_config`'s scopes and storage location; the
api-server's recovery reads `on_crash`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from domain.egress import EgressPolicy, parse_egress_policy
from domain.idle import IdlePolicy, PressurePolicy, parse_idle_policy, parse_pressure_policy
from domain.quantities import parse_cpu_millis, parse_memory_bytes
from domain.registry_credentials import pull_secret_names
from domain.states import SnapshotScope

DEFAULT_SERVING_PORT = 80
"""Where the router sends traffic when a template names neither a port nor a wakeup probe."""

RETAIN_GENERATIONS_DEFAULT = 2
"""How many COMPLETED generations of each actor the snapshot collector keeps when a template does
not say (`snapshotConfig.retainGenerations`): the latest and the one before it. Two is the fewest
that lets an actor go back past a damaged or unwanted latest snapshot without a tag
(`ate revert actor NAME --to-generation G`), at twice the storage one generation takes; more
history is a setting away, and a tag keeps a snapshot for good. (The reference system keeps only
the latest.)"""

RETAIN_GENERATIONS_MAX = 100
"""The most generations a template may keep per actor (`snapshotConfig.retainGenerations`)."""


@dataclass
class HttpGetProbe:
    """A wakeup probe: an HTTP 200 from GET `path` on `port` of the worker's address means awake."""

    port: int
    path: str = "/"


@dataclass
class HttpHook:
    """An HTTP call ate makes to a container: POST `path` on `port` of the worker's address."""

    port: int
    path: str = "/"


@dataclass
class VolumeMount:
    """A declared volume mounted at `mount_path` (absolute) in a container."""

    name: str
    mount_path: str


@dataclass
class Container:
    """One container of an actor: `image` is `oci:<path>:<tag>`, a local OCI image layout
    relative to the atelet's image root; `port` is where the router sends traffic (None: the
    wakeup probe's port)."""

    name: str
    image: str
    command: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    port: int | None = None
    wakeup_probe: HttpGetProbe | None = None
    volume_mounts: list[VolumeMount] = field(default_factory=list)
    post_restore: HttpHook | None = None
    """`lifecycle.postRestore.httpPost`: after every restore, before traffic, ate POSTs what the
    sandbox was restored from (source, generation, time suspended, whether a fork) here, so the
    workload can renew what must be unique (tokens, seeds, leases)."""


@dataclass
class Volume:
    """A volume; `durable_dir` marks a directory kept in every snapshot scope (DATA included)."""

    name: str
    durable_dir: bool = True


@dataclass
class ResourceLimits:
    """resources.limits as written (`cpu`: "500m", `memory`: "256Mi", None when unset) and as
    placement reserves them on a worker (`cpu_millis`, `memory_bytes`; 0 when unset)."""

    cpu: str | None = None
    memory: str | None = None
    cpu_millis: int = 0
    memory_bytes: int = 0

    @classmethod
    def of(cls, cpu: str | None, memory: str | None) -> ResourceLimits:
        """Parse the quantities once.

        Raises:
            ValueError: a quantity is malformed (see `domain.quantities`).
        """
        return cls(
            cpu=cpu,
            memory=memory,
            cpu_millis=parse_cpu_millis(cpu) if cpu is not None else 0,
            memory_bytes=parse_memory_bytes(memory) if memory is not None else 0,
        )


@dataclass
class SnapshotConfig:
    """Snapshot scopes of a pause (`on_pause`) and a suspend (`on_commit`), where snapshots are
    stored (`storage_location`, a URI such as `file:///...`; empty: the API's default), and how
    many COMPLETED generations of each actor are kept (`retain_generations`, 1 to
    RETAIN_GENERATIONS_MAX; the collector deletes older ones nothing else keeps)."""

    on_pause: SnapshotScope = SnapshotScope.FULL
    on_commit: SnapshotScope = SnapshotScope.FULL
    storage_location: str = ""
    retain_generations: int = RETAIN_GENERATIONS_DEFAULT


class AccessMode(StrEnum):
    """Who the router lets reach a template's actors: anyone (`public`), or only callers whose
    bearer token grants access to that actor or its atespace (`token`)."""

    PUBLIC = "public"
    TOKEN = "token"


@dataclass
class ActorAccess:
    """The router's access rule for a template's actors; `pass_credential` forwards the
    caller's credential (Authorization header, `ate-token` cookie) to the actor instead of
    stripping it."""

    mode: AccessMode = AccessMode.PUBLIC
    pass_credential: bool = False


class CrashAction(StrEnum):
    """What the control plane does by itself with a CRASHED actor of the template (`onCrash`):
    `Revert` starts RevertActor (back to its last COMPLETED snapshot; it resumes at its next
    request). Unset: nothing; the actor waits for an operator's revert."""

    REVERT = "Revert"


@dataclass
class ActorTemplateSpec:
    """An actor template's spec (ARCHITECTURE.md, "actor template"), validated."""

    containers: list[Container]
    sandbox_class: str = "gvisor"
    worker_selector: dict[str, str] = field(default_factory=dict)
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    volumes: list[Volume] = field(default_factory=list)
    snapshot_config: SnapshotConfig = field(default_factory=SnapshotConfig)
    access: ActorAccess = field(default_factory=ActorAccess)
    on_crash: CrashAction | None = None
    idle: IdlePolicy = field(default_factory=IdlePolicy)
    """What happens to an actor without traffic (`domain.idle`); off by default."""
    pressure: PressurePolicy = field(default_factory=PressurePolicy)
    """Whether ate may suspend its actors to make room for another's resume (`suspendUnderPressure`)."""
    egress: EgressPolicy = field(default_factory=EgressPolicy)
    """Where its actors may connect out to, and the credentials injected (`domain.egress`); none by default."""
    image_pull_secrets: list[str] = field(default_factory=list)
    """The registry secrets its images are pulled with (`imagePullSecrets`, `domain.registry_credentials`)."""

    @property
    def serving_port(self) -> int:
        """Where the router sends traffic: containers[0].port, else its wakeup probe's port, else 80."""
        first = self.containers[0]
        if first.port is not None:
            return first.port
        if first.wakeup_probe is not None:
            return first.wakeup_probe.port
        return DEFAULT_SERVING_PORT

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> ActorTemplateSpec:
        """Parse a validated spec document (camelCase keys, as stored by the API).

        Args:
            document: {sandboxClass, workerSelector, containers[{name, image, command, env, port,
                wakeupProbe{httpGet{path, port}}, volumeMounts[{name, mountPath}],
                lifecycle{postRestore{httpPost{path, port}}}}],
                resources{limits{cpu, memory}}, volumes[{name, durableDir}],
                snapshotConfig{onPause, onCommit, storageLocation, retainGenerations}, access{mode, passCredential},
                onCrash, idle (`domain.idle.parse_idle_policy`), suspendUnderPressure
                (`domain.idle.parse_pressure_policy`), egress (`domain.egress.parse_egress_policy`)}.

        Raises:
            ValueError: the document is not a template spec (a key is missing or has the wrong
                type); never for a document the API validated.
        """
        try:
            limits = (document.get("resources") or {}).get("limits") or {}
            snapshots = document.get("snapshotConfig") or {}
            access = document.get("access") or {}
            return cls(
                containers=[_container(c) for c in document["containers"]],
                sandbox_class=str(document.get("sandboxClass") or "gvisor"),
                worker_selector={str(k): str(v) for k, v in (document.get("workerSelector") or {}).items()},
                limits=ResourceLimits.of(_text(limits.get("cpu")), _text(limits.get("memory"))),
                volumes=[Volume(name=str(v["name"]), durable_dir="durableDir" in v) for v in document.get("volumes") or []],
                snapshot_config=SnapshotConfig(
                    on_pause=SnapshotScope(str(snapshots.get("onPause") or "Full").upper()),
                    on_commit=SnapshotScope(str(snapshots.get("onCommit") or "Full").upper()),
                    storage_location=str(snapshots.get("storageLocation") or ""),
                    retain_generations=int(snapshots.get("retainGenerations") or RETAIN_GENERATIONS_DEFAULT),
                ),
                access=ActorAccess(
                    mode=AccessMode(str(access.get("mode") or "public")),
                    pass_credential=bool(access.get("passCredential", False)),
                ),
                on_crash=CrashAction(str(document["onCrash"])) if document.get("onCrash") else None,
                idle=parse_idle_policy(document.get("idle")),
                pressure=parse_pressure_policy(document.get("suspendUnderPressure")),
                egress=parse_egress_policy(document.get("egress")),
                image_pull_secrets=pull_secret_names(document),
            )
        except (KeyError, TypeError, AttributeError, IndexError) as error:
            raise ValueError(f"not an actor template spec: {error!r}") from error

    def document(self) -> dict[str, Any]:
        """The spec as the camelCase document the API validated and shows (`from_document`'s inverse)."""
        limits = {k: v for k, v in (("cpu", self.limits.cpu), ("memory", self.limits.memory)) if v is not None}
        snapshots: dict[str, Any] = {
            "onPause": self.snapshot_config.on_pause.value.capitalize(),
            "onCommit": self.snapshot_config.on_commit.value.capitalize(),
            "retainGenerations": self.snapshot_config.retain_generations,
        }
        if self.snapshot_config.storage_location:
            snapshots["storageLocation"] = self.snapshot_config.storage_location
        document: dict[str, Any] = {
            "sandboxClass": self.sandbox_class,
            "workerSelector": dict(self.worker_selector),
            "containers": [_container_document(c) for c in self.containers],
            **({"imagePullSecrets": [{"name": n} for n in self.image_pull_secrets]} if self.image_pull_secrets else {}),
            "resources": {"limits": limits},
            "volumes": [{"name": v.name, "durableDir": {}} for v in self.volumes],
            "snapshotConfig": snapshots,
            "access": {"mode": self.access.mode.value, "passCredential": self.access.pass_credential},
        }
        if self.on_crash is not None:
            document["onCrash"] = self.on_crash.value
        if not self.idle.off:
            document["idle"] = self.idle.document()
        if self.pressure.enabled:
            document["suspendUnderPressure"] = self.pressure.document()
        if not self.egress.off:
            document["egress"] = self.egress.document()
        return document


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _container(c: dict[str, Any]) -> Container:
    probe = (c.get("wakeupProbe") or {}).get("httpGet")
    hook = ((c.get("lifecycle") or {}).get("postRestore") or {}).get("httpPost")
    env = c.get("env") or {}
    if isinstance(env, list):  # Kubernetes style [{name, value}]
        env = {e["name"]: str(e.get("value", "")) for e in env}
    return Container(
        name=str(c["name"]),
        image=str(c["image"]),
        command=[str(x) for x in c.get("command") or []],
        env={str(k): str(v) for k, v in env.items()},
        port=int(c["port"]) if c.get("port") is not None else None,
        wakeup_probe=HttpGetProbe(port=int(probe["port"]), path=str(probe.get("path") or "/")) if probe else None,
        volume_mounts=[VolumeMount(name=str(m["name"]), mount_path=str(m["mountPath"])) for m in c.get("volumeMounts") or []],
        post_restore=HttpHook(port=int(hook["port"]), path=str(hook.get("path") or "/")) if hook else None,
    )


def _container_document(c: Container) -> dict[str, Any]:
    out: dict[str, Any] = {"name": c.name, "image": c.image, "command": list(c.command), "env": dict(c.env)}
    if c.port is not None:
        out["port"] = c.port
    if c.wakeup_probe is not None:
        out["wakeupProbe"] = {"httpGet": {"path": c.wakeup_probe.path, "port": c.wakeup_probe.port}}
    out["volumeMounts"] = [{"name": m.name, "mountPath": m.mount_path} for m in c.volume_mounts]
    if c.post_restore is not None:
        out["lifecycle"] = {"postRestore": {"httpPost": {"path": c.post_restore.path, "port": c.post_restore.port}}}
    return out
