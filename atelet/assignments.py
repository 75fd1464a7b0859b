"""What runs on each worker, persisted so that a restarted atelet can adopt its running sandboxes.

runsc sandboxes are detached: they outlive the atelet process (SIGKILL, crash, upgrade restart).
For each worker that holds an actor, ``<state_dir>/workers/<worker>/assignment.json`` says what
runs there; it is rewritten atomically (temp file, fsync, rename) whenever that changes and
removed when the worker becomes idle. A restarted atelet reads these records (``load_all``) and
adopts every sandbox that still runs (``atelet.adoption``); a record whose sandbox is gone is cleaned up.

Fields (JSON): ``version``; ``worker``; ``actor`` {atespace, name}; ``container_id`` (runsc
container, null once the sandbox stopped); ``state`` (running | exited); ``exit_reason``;
``net`` {netns, host_if, peer_if, host_ip, worker_ip, prefixlen}; ``probe`` {ip, port, path}
(port 0: no wakeup probe); ``durable_dir`` (host path of the actor's dir, its volumes below) and
``volumes`` {name: host path}; ``log`` and ``bundle`` (host paths); ``operation`` {id, kind} (the
Run/Restore that started the sandbox); ``spec`` (the WorkloadSpec, base64 protobuf);
``runsc_version``; ``started_at`` / ``updated_at`` (Unix seconds); ``checkpoint`` (null, or the
checkpoint in progress on the worker: ``PendingCheckpoint``, so that a restarted atelet finishes
it instead of losing the memory it saved); ``frozen`` (true: the sandbox was frozen by Freeze, or
a Freeze was about to freeze it: a restarted atelet adopts it frozen; absent in older records:
false).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from atelet.netns import WorkerNet
from atelet.proto import atelet_pb2 as pb

log = logging.getLogger(__name__)

VERSION = 1
FILE_NAME = "assignment.json"


@dataclass
class PendingCheckpoint:
    """A checkpoint of the worker's sandbox that has started and not yet been committed.

    Fields: ``operation_id`` and ``snapshot_uri`` of the Checkpoint call; ``scope`` (SnapshotScope
    number); ``staging`` (the directory its files are written to); ``journal`` (the directory where
    the runtime's checkpoint process records its pid, output and exit status: it outlives the
    atelet); ``leave_running`` (the sandbox stays, frozen, after the save: the object-storage path);
    ``saved`` (the save succeeded: what is left is archiving the durable dirs and the commit).
    """

    operation_id: str
    snapshot_uri: str
    scope: int
    staging: str
    journal: str
    leave_running: bool = False
    saved: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PendingCheckpoint:
        """Parses the record's ``checkpoint`` field; ValueError/KeyError/TypeError when malformed."""
        return cls(operation_id=str(data["operation_id"]), snapshot_uri=str(data["snapshot_uri"]),
                   scope=int(data["scope"]), staging=str(data["staging"]), journal=str(data["journal"]),
                   leave_running=bool(data.get("leave_running")), saved=bool(data.get("saved")))


@dataclass
class Assignment:
    """One worker's persisted assignment (see the module doc for the fields)."""

    worker: str
    actor: tuple[str, str]
    container_id: str | None
    state: str
    net: WorkerNet
    spec: pb.WorkloadSpec
    operation_id: str
    operation_kind: str
    durable_dir: str
    volumes: dict[str, str] = field(default_factory=dict)
    log: str = ""
    bundle: str = ""
    exit_reason: str = ""
    runsc_version: str = ""
    started_at: float = 0.0
    checkpoint: PendingCheckpoint | None = None
    frozen: bool = False

    @property
    def probe(self) -> tuple[int, str]:
        """(port, path) of the wakeup probe; port 0 when the container has none."""
        container = self.spec.containers[0] if self.spec.containers else None
        if container is None or not container.wakeup_probe.port:
            return 0, ""
        return container.wakeup_probe.port, container.wakeup_probe.path or "/"

    def to_json(self) -> dict[str, Any]:
        """The record as written to disk."""
        port, path = self.probe
        return {
            "version": VERSION,
            "worker": self.worker,
            "actor": {"atespace": self.actor[0], "name": self.actor[1]},
            "container_id": self.container_id,
            "state": self.state,
            "exit_reason": self.exit_reason,
            "net": asdict(self.net),
            "probe": {"ip": self.net.worker_ip, "port": port, "path": path},
            "durable_dir": self.durable_dir,
            "volumes": self.volumes,
            "log": self.log,
            "bundle": self.bundle,
            "operation": {"id": self.operation_id, "kind": self.operation_kind},
            "spec": base64.b64encode(self.spec.SerializeToString()).decode(),
            "runsc_version": self.runsc_version,
            "started_at": self.started_at,
            "checkpoint": asdict(self.checkpoint) if self.checkpoint is not None else None,
            "frozen": self.frozen,
            "updated_at": time.time(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Assignment:
        """Parses a record; raises ValueError (or KeyError/TypeError) when it is malformed."""
        if data.get("version") != VERSION:
            raise ValueError(f"unknown record version {data.get('version')!r}")
        spec = pb.WorkloadSpec()
        spec.ParseFromString(base64.b64decode(data["spec"]))
        actor = data["actor"]
        return cls(
            worker=str(data["worker"]),
            actor=(str(actor["atespace"]), str(actor["name"])),
            container_id=data.get("container_id") or None,
            state=str(data["state"]),
            net=WorkerNet(**data["net"]),
            spec=spec,
            operation_id=str(data["operation"]["id"]),
            operation_kind=str(data["operation"]["kind"]),
            durable_dir=str(data["durable_dir"]),
            volumes={str(k): str(v) for k, v in (data.get("volumes") or {}).items()},
            log=str(data.get("log") or ""),
            bundle=str(data.get("bundle") or ""),
            exit_reason=str(data.get("exit_reason") or ""),
            runsc_version=str(data.get("runsc_version") or ""),
            started_at=float(data.get("started_at") or 0.0),
            checkpoint=PendingCheckpoint.from_json(data["checkpoint"]) if data.get("checkpoint") else None,
            frozen=bool(data.get("frozen")),
        )


class AssignmentStore:
    """The records under ``<workers_dir>/<worker>/assignment.json``."""

    def __init__(self, workers_dir: Path) -> None:
        self.workers_dir = Path(workers_dir)

    def path(self, worker: str) -> Path:
        """Where ``worker``'s record lives."""
        return self.workers_dir / worker / FILE_NAME

    def save(self, assignment: Assignment) -> None:
        """Writes the record atomically: a crash leaves either the old or the new record."""
        path = self.path(assignment.worker)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{FILE_NAME}.tmp")
        data = json.dumps(assignment.to_json(), indent=1).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        _fsync_dir(path.parent)

    def remove(self, worker: str) -> None:
        """Forgets the worker's record (the worker is idle)."""
        path = self.path(worker)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        _fsync_dir(path.parent)

    def load_all(self) -> dict[str, Assignment]:
        """Every readable record by worker name; unreadable ones are logged and skipped (removed)."""
        records: dict[str, Assignment] = {}
        if not self.workers_dir.is_dir():
            return records
        for path in sorted(self.workers_dir.glob(f"*/{FILE_NAME}")):
            try:
                record = Assignment.from_json(json.loads(path.read_text()))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable assignment record %s: %s", path, exc)
                path.unlink(missing_ok=True)
                continue
            if record.worker != path.parent.name:
                log.warning("ignoring assignment record %s: it names worker %s", path, record.worker)
                path.unlink(missing_ok=True)
                continue
            records[record.worker] = record
        return records


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
