# ruff: noqa
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SnapshotScope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SNAPSHOT_SCOPE_UNSPECIFIED: _ClassVar[SnapshotScope]
    SNAPSHOT_SCOPE_FULL: _ClassVar[SnapshotScope]
    SNAPSHOT_SCOPE_DATA: _ClassVar[SnapshotScope]
SNAPSHOT_SCOPE_UNSPECIFIED: SnapshotScope
SNAPSHOT_SCOPE_FULL: SnapshotScope
SNAPSHOT_SCOPE_DATA: SnapshotScope

class ActorRef(_message.Message):
    __slots__ = ("atespace", "name")
    ATESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    atespace: str
    name: str
    def __init__(self, atespace: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class HttpGetProbe(_message.Message):
    __slots__ = ("path", "port")
    PATH_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    path: str
    port: int
    def __init__(self, path: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class VolumeMount(_message.Message):
    __slots__ = ("name", "mount_path")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MOUNT_PATH_FIELD_NUMBER: _ClassVar[int]
    name: str
    mount_path: str
    def __init__(self, name: _Optional[str] = ..., mount_path: _Optional[str] = ...) -> None: ...

class Container(_message.Message):
    __slots__ = ("name", "image", "command", "env", "wakeup_probe", "volume_mounts", "post_restore")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    WAKEUP_PROBE_FIELD_NUMBER: _ClassVar[int]
    VOLUME_MOUNTS_FIELD_NUMBER: _ClassVar[int]
    POST_RESTORE_FIELD_NUMBER: _ClassVar[int]
    name: str
    image: str
    command: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    wakeup_probe: HttpGetProbe
    volume_mounts: _containers.RepeatedCompositeFieldContainer[VolumeMount]
    post_restore: HttpHook
    def __init__(self, name: _Optional[str] = ..., image: _Optional[str] = ..., command: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., wakeup_probe: _Optional[_Union[HttpGetProbe, _Mapping]] = ..., volume_mounts: _Optional[_Iterable[_Union[VolumeMount, _Mapping]]] = ..., post_restore: _Optional[_Union[HttpHook, _Mapping]] = ...) -> None: ...

class HttpHook(_message.Message):
    __slots__ = ("path", "port")
    PATH_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    path: str
    port: int
    def __init__(self, path: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class RestoreNotice(_message.Message):
    __slots__ = ("source", "generation", "suspended_at", "forked")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SUSPENDED_AT_FIELD_NUMBER: _ClassVar[int]
    FORKED_FIELD_NUMBER: _ClassVar[int]
    source: str
    generation: int
    suspended_at: float
    forked: bool
    def __init__(self, source: _Optional[str] = ..., generation: _Optional[int] = ..., suspended_at: _Optional[float] = ..., forked: _Optional[bool] = ...) -> None: ...

class Volume(_message.Message):
    __slots__ = ("name", "durable_dir")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DURABLE_DIR_FIELD_NUMBER: _ClassVar[int]
    name: str
    durable_dir: bool
    def __init__(self, name: _Optional[str] = ..., durable_dir: _Optional[bool] = ...) -> None: ...

class WorkloadSpec(_message.Message):
    __slots__ = ("containers", "volumes", "cpu_millis", "memory_bytes", "template", "generation", "golden")
    CONTAINERS_FIELD_NUMBER: _ClassVar[int]
    VOLUMES_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    GOLDEN_FIELD_NUMBER: _ClassVar[int]
    containers: _containers.RepeatedCompositeFieldContainer[Container]
    volumes: _containers.RepeatedCompositeFieldContainer[Volume]
    cpu_millis: int
    memory_bytes: int
    template: str
    generation: int
    golden: bool
    def __init__(self, containers: _Optional[_Iterable[_Union[Container, _Mapping]]] = ..., volumes: _Optional[_Iterable[_Union[Volume, _Mapping]]] = ..., cpu_millis: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., template: _Optional[str] = ..., generation: _Optional[int] = ..., golden: _Optional[bool] = ...) -> None: ...

class SnapshotFile(_message.Message):
    __slots__ = ("path", "sha256", "size_bytes")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    path: str
    sha256: str
    size_bytes: int
    def __init__(self, path: _Optional[str] = ..., sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class SnapshotManifest(_message.Message):
    __slots__ = ("sandbox_class", "scope", "runsc_version", "files", "actor", "created_by_operation")
    SANDBOX_CLASS_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    RUNSC_VERSION_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_OPERATION_FIELD_NUMBER: _ClassVar[int]
    sandbox_class: str
    scope: SnapshotScope
    runsc_version: str
    files: _containers.RepeatedCompositeFieldContainer[SnapshotFile]
    actor: ActorRef
    created_by_operation: str
    def __init__(self, sandbox_class: _Optional[str] = ..., scope: _Optional[_Union[SnapshotScope, str]] = ..., runsc_version: _Optional[str] = ..., files: _Optional[_Iterable[_Union[SnapshotFile, _Mapping]]] = ..., actor: _Optional[_Union[ActorRef, _Mapping]] = ..., created_by_operation: _Optional[str] = ...) -> None: ...

class RunRequest(_message.Message):
    __slots__ = ("operation_id", "worker", "actor", "spec", "probe_timeout_seconds")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    PROBE_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    worker: str
    actor: ActorRef
    spec: WorkloadSpec
    probe_timeout_seconds: float
    def __init__(self, operation_id: _Optional[str] = ..., worker: _Optional[str] = ..., actor: _Optional[_Union[ActorRef, _Mapping]] = ..., spec: _Optional[_Union[WorkloadSpec, _Mapping]] = ..., probe_timeout_seconds: _Optional[float] = ...) -> None: ...

class RunResponse(_message.Message):
    __slots__ = ("worker_ip", "boot_seconds", "probe_seconds")
    WORKER_IP_FIELD_NUMBER: _ClassVar[int]
    BOOT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PROBE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    worker_ip: str
    boot_seconds: float
    probe_seconds: float
    def __init__(self, worker_ip: _Optional[str] = ..., boot_seconds: _Optional[float] = ..., probe_seconds: _Optional[float] = ...) -> None: ...

class RestoreRequest(_message.Message):
    __slots__ = ("operation_id", "worker", "actor", "spec", "snapshot_uri", "manifest", "probe_timeout_seconds", "notice")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_URI_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    PROBE_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    NOTICE_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    worker: str
    actor: ActorRef
    spec: WorkloadSpec
    snapshot_uri: str
    manifest: SnapshotManifest
    probe_timeout_seconds: float
    notice: RestoreNotice
    def __init__(self, operation_id: _Optional[str] = ..., worker: _Optional[str] = ..., actor: _Optional[_Union[ActorRef, _Mapping]] = ..., spec: _Optional[_Union[WorkloadSpec, _Mapping]] = ..., snapshot_uri: _Optional[str] = ..., manifest: _Optional[_Union[SnapshotManifest, _Mapping]] = ..., probe_timeout_seconds: _Optional[float] = ..., notice: _Optional[_Union[RestoreNotice, _Mapping]] = ...) -> None: ...

class RestoreResponse(_message.Message):
    __slots__ = ("worker_ip", "fetch_seconds", "restore_seconds", "probe_seconds", "snapshot_cache_hit")
    WORKER_IP_FIELD_NUMBER: _ClassVar[int]
    FETCH_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RESTORE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PROBE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_CACHE_HIT_FIELD_NUMBER: _ClassVar[int]
    worker_ip: str
    fetch_seconds: float
    restore_seconds: float
    probe_seconds: float
    snapshot_cache_hit: bool
    def __init__(self, worker_ip: _Optional[str] = ..., fetch_seconds: _Optional[float] = ..., restore_seconds: _Optional[float] = ..., probe_seconds: _Optional[float] = ..., snapshot_cache_hit: _Optional[bool] = ...) -> None: ...

class CheckpointRequest(_message.Message):
    __slots__ = ("operation_id", "worker", "actor", "scope", "snapshot_uri")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_URI_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    worker: str
    actor: ActorRef
    scope: SnapshotScope
    snapshot_uri: str
    def __init__(self, operation_id: _Optional[str] = ..., worker: _Optional[str] = ..., actor: _Optional[_Union[ActorRef, _Mapping]] = ..., scope: _Optional[_Union[SnapshotScope, str]] = ..., snapshot_uri: _Optional[str] = ...) -> None: ...

class CheckpointResponse(_message.Message):
    __slots__ = ("manifest", "size_bytes", "checkpoint_seconds", "upload_seconds", "egress_wait_seconds", "egress_cut")
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    EGRESS_WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    EGRESS_CUT_FIELD_NUMBER: _ClassVar[int]
    manifest: SnapshotManifest
    size_bytes: int
    checkpoint_seconds: float
    upload_seconds: float
    egress_wait_seconds: float
    egress_cut: int
    def __init__(self, manifest: _Optional[_Union[SnapshotManifest, _Mapping]] = ..., size_bytes: _Optional[int] = ..., checkpoint_seconds: _Optional[float] = ..., upload_seconds: _Optional[float] = ..., egress_wait_seconds: _Optional[float] = ..., egress_cut: _Optional[int] = ...) -> None: ...

class TerminateRequest(_message.Message):
    __slots__ = ("operation_id", "worker", "actor", "started_by")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    STARTED_BY_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    worker: str
    actor: ActorRef
    started_by: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, operation_id: _Optional[str] = ..., worker: _Optional[str] = ..., actor: _Optional[_Union[ActorRef, _Mapping]] = ..., started_by: _Optional[_Iterable[str]] = ...) -> None: ...

class TerminateResponse(_message.Message):
    __slots__ = ("was_running",)
    WAS_RUNNING_FIELD_NUMBER: _ClassVar[int]
    was_running: bool
    def __init__(self, was_running: _Optional[bool] = ...) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkerStatus(_message.Message):
    __slots__ = ("name", "pool", "ip", "actor", "sandbox_state", "exit_reason", "frozen")
    NAME_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    IP_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_REASON_FIELD_NUMBER: _ClassVar[int]
    FROZEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    pool: str
    ip: str
    actor: ActorRef
    sandbox_state: str
    exit_reason: str
    frozen: bool
    def __init__(self, name: _Optional[str] = ..., pool: _Optional[str] = ..., ip: _Optional[str] = ..., actor: _Optional[_Union[ActorRef, _Mapping]] = ..., sandbox_state: _Optional[str] = ..., exit_reason: _Optional[str] = ..., frozen: _Optional[bool] = ...) -> None: ...

class HealthResponse(_message.Message):
    __slots__ = ("node", "runsc_version", "workers")
    NODE_FIELD_NUMBER: _ClassVar[int]
    RUNSC_VERSION_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    node: str
    runsc_version: str
    workers: _containers.RepeatedCompositeFieldContainer[WorkerStatus]
    def __init__(self, node: _Optional[str] = ..., runsc_version: _Optional[str] = ..., workers: _Optional[_Iterable[_Union[WorkerStatus, _Mapping]]] = ...) -> None: ...

class DeleteSnapshotRequest(_message.Message):
    __slots__ = ("operation_id", "snapshot_uri")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_URI_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    snapshot_uri: str
    def __init__(self, operation_id: _Optional[str] = ..., snapshot_uri: _Optional[str] = ...) -> None: ...

class DeleteSnapshotResponse(_message.Message):
    __slots__ = ("existed",)
    EXISTED_FIELD_NUMBER: _ClassVar[int]
    existed: bool
    def __init__(self, existed: _Optional[bool] = ...) -> None: ...

class CopySnapshotRequest(_message.Message):
    __slots__ = ("operation_id", "source_uri", "destination_uri", "manifest")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_URI_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_URI_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    source_uri: str
    destination_uri: str
    manifest: SnapshotManifest
    def __init__(self, operation_id: _Optional[str] = ..., source_uri: _Optional[str] = ..., destination_uri: _Optional[str] = ..., manifest: _Optional[_Union[SnapshotManifest, _Mapping]] = ...) -> None: ...

class CopySnapshotResponse(_message.Message):
    __slots__ = ("manifest", "size_bytes", "copy_seconds")
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    COPY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    manifest: SnapshotManifest
    size_bytes: int
    copy_seconds: float
    def __init__(self, manifest: _Optional[_Union[SnapshotManifest, _Mapping]] = ..., size_bytes: _Optional[int] = ..., copy_seconds: _Optional[float] = ...) -> None: ...

class FreezeRequest(_message.Message):
    __slots__ = ("operation_id", "worker", "actor")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    worker: str
    actor: ActorRef
    def __init__(self, operation_id: _Optional[str] = ..., worker: _Optional[str] = ..., actor: _Optional[_Union[ActorRef, _Mapping]] = ...) -> None: ...

class FreezeResponse(_message.Message):
    __slots__ = ("already_frozen", "freeze_seconds", "method")
    ALREADY_FROZEN_FIELD_NUMBER: _ClassVar[int]
    FREEZE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    already_frozen: bool
    freeze_seconds: float
    method: str
    def __init__(self, already_frozen: _Optional[bool] = ..., freeze_seconds: _Optional[float] = ..., method: _Optional[str] = ...) -> None: ...

class ThawRequest(_message.Message):
    __slots__ = ("operation_id", "worker", "actor")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    worker: str
    actor: ActorRef
    def __init__(self, operation_id: _Optional[str] = ..., worker: _Optional[str] = ..., actor: _Optional[_Union[ActorRef, _Mapping]] = ...) -> None: ...

class ThawResponse(_message.Message):
    __slots__ = ("was_frozen", "thaw_seconds", "method")
    WAS_FROZEN_FIELD_NUMBER: _ClassVar[int]
    THAW_SECONDS_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    was_frozen: bool
    thaw_seconds: float
    method: str
    def __init__(self, was_frozen: _Optional[bool] = ..., thaw_seconds: _Optional[float] = ..., method: _Optional[str] = ...) -> None: ...

class ExecRequest(_message.Message):
    __slots__ = ("operation_id", "worker", "actor", "command", "timeout_seconds", "max_output_bytes")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    worker: str
    actor: ActorRef
    command: _containers.RepeatedScalarFieldContainer[str]
    timeout_seconds: float
    max_output_bytes: int
    def __init__(self, operation_id: _Optional[str] = ..., worker: _Optional[str] = ..., actor: _Optional[_Union[ActorRef, _Mapping]] = ..., command: _Optional[_Iterable[str]] = ..., timeout_seconds: _Optional[float] = ..., max_output_bytes: _Optional[int] = ...) -> None: ...

class ExecResponse(_message.Message):
    __slots__ = ("exit_code", "stdout", "stderr", "stdout_truncated", "stderr_truncated", "ended", "seconds")
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STDOUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    STDERR_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    ended: str
    seconds: float
    def __init__(self, exit_code: _Optional[int] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., stdout_truncated: _Optional[bool] = ..., stderr_truncated: _Optional[bool] = ..., ended: _Optional[str] = ..., seconds: _Optional[float] = ...) -> None: ...
