"""The atelet's wire messages built from ate's own types (`atelet/proto/atelet.proto`).

Pure translation, no I/O: a template spec as the atelet's `WorkloadSpec`, an actor reference, a
snapshot scope, a stored manifest, and the operation ID of one atelet call of an operation.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.json_format import MessageToDict, ParseDict

from atelet.proto import atelet_pb2 as pb
from domain.refs import ActorRef, SnapshotRef
from domain.states import SnapshotScope
from domain.templates import ActorTemplateSpec

SCOPES = {SnapshotScope.FULL: pb.SNAPSHOT_SCOPE_FULL, SnapshotScope.DATA: pb.SNAPSHOT_SCOPE_DATA}
"""A snapshot scope as the atelet's enum."""


def workload_spec(spec: ActorTemplateSpec, template: str = "", generation: int = 0) -> pb.WorkloadSpec:
    """The atelet's WorkloadSpec of an actor template spec, labelled with the template's name and
    the generation of the actor's snapshot it is restored from (0: golden snapshot, or a boot).

    Returns:
        The proto message; CPU in millicores, memory in bytes (0 = no limit).
    """
    return pb.WorkloadSpec(
        containers=[
            pb.Container(
                name=c.name,
                image=c.image,
                command=c.command,
                env=c.env,
                wakeup_probe=pb.HttpGetProbe(path=c.wakeup_probe.path, port=c.wakeup_probe.port)
                if c.wakeup_probe
                else None,
                volume_mounts=[pb.VolumeMount(name=m.name, mount_path=m.mount_path) for m in c.volume_mounts],
                post_restore=pb.HttpHook(path=c.post_restore.path, port=c.post_restore.port)
                if c.post_restore
                else None,
            )
            for c in spec.containers
        ],
        volumes=[pb.Volume(name=v.name, durable_dir=v.durable_dir) for v in spec.volumes],
        cpu_millis=spec.limits.cpu_millis,
        memory_bytes=spec.limits.memory_bytes,
        template=template,
        generation=generation,
    )


def call_id(operation_id: str, call: str) -> str:
    """The atelet operation ID of one call of an operation: `<operation>/<call>`.

    A workflow makes several atelet calls (run, checkpoint, terminate); each needs its own ID,
    stable across retries of the same call.
    """
    return f"{operation_id}/{call}"


def actor_ref(actor: ActorRef) -> pb.ActorRef:
    """An actor reference as the atelet's message."""
    return pb.ActorRef(atespace=actor.atespace, name=actor.name)


def own_generation(snapshot: SnapshotRef | None, holder: ActorRef) -> int:
    """The generation of `snapshot` when it was taken of `holder` itself (its manifest's `actor`),
    else 0: a boot, or a restore from its template's golden snapshot."""
    if snapshot is None or not snapshot.manifest:
        return 0
    taken_of = snapshot.manifest.get("actor") or {}
    own = (taken_of.get("atespace"), taken_of.get("name")) == (holder.atespace, holder.name)
    return snapshot.generation if own else 0


def restore_notice(spec: ActorTemplateSpec, snapshot: SnapshotRef, holder: ActorRef) -> pb.RestoreNotice | None:
    """What a restored sandbox of `holder` is told at its containers' post_restore hooks about
    `snapshot`; None when no container of `spec` has one (nothing to tell)."""
    if not any(c.post_restore for c in spec.containers):
        return None
    return pb.RestoreNotice(
        source=snapshot.owner,
        generation=snapshot.generation,
        suspended_at=snapshot.completed_at or 0.0,
        forked=snapshot.owner != holder.workflow_id,
    )


def manifest_message(manifest: dict[str, Any] | None) -> pb.SnapshotManifest:
    """A stored snapshot manifest (JSON, as the atelet wrote it) as the atelet's message; unknown
    fields are ignored, an empty or missing manifest is an empty message."""
    message = pb.SnapshotManifest()
    if manifest:
        ParseDict(manifest, message, ignore_unknown_fields=True)
    return message


def manifest_dict(message: pb.SnapshotManifest) -> dict[str, Any]:
    """The atelet's manifest as JSON to store (proto field names kept)."""
    return MessageToDict(message, preserving_proto_field_name=True)
