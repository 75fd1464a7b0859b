"""Store records -> API response models, and page tokens."""

from __future__ import annotations

import base64
import json

from api.errors import InvalidArgument
from api.schemas import (
    ActorPublic,
    IdleOfActor,
    IdleStepOfActor,
    ImagePullPublic,
    OperationPublic,
    SnapshotOfActor,
    TagPublic,
    TemplatePublic,
    WorkerOfActor,
    WorkerPublic,
)
from domain.names import check_label_name
from domain.states import ActorState, WorkerState
from store.image_pulls import ImagePull
from store.records import ActorRecord, OperationRecord, TagRecord, TemplateRecord, WorkerRecord


def idle_view(actor: ActorRecord) -> IdleOfActor | None:
    """The actor's idle policy in force and where it stands: how long it has been idle, its next
    step and in how many seconds (0: due now, the api-server's idle judge starts it within a
    second); None when neither the actor nor its template has a policy."""
    if actor.idle_source == "off":
        return None
    policy = actor.idle_policy
    steps = [IdleStepOfActor(afterSeconds=s.after_seconds, action=s.action.value) for s in policy.steps]
    resting = actor.state in (ActorState.RUNNING, ActorState.FROZEN, ActorState.PAUSED) and actor.operation is None
    idle = actor.idle_seconds if resting else None
    step = policy.next_step_in(actor.state) if idle is not None else None
    return IdleOfActor(
        policy=steps,
        source="actor" if actor.idle_source == "actor" else "template",
        idle_seconds=None if idle is None else round(idle, 1),
        next_action=step.action.value if step is not None else None,
        next_action_in_seconds=None if step is None or idle is None else round(max(0.0, step.after_seconds - idle), 1),
    )


def actor_view(actor: ActorRecord) -> ActorPublic:
    """The API shape of an actor."""
    return ActorPublic(
        atespace=actor.atespace,
        name=actor.name,
        template=actor.template,
        state=actor.state,
        version=actor.version,
        worker_selector=actor.worker_selector,
        worker=WorkerOfActor(pool=actor.worker.pool, name=actor.worker.name, node=actor.worker.node, ip=actor.worker.ip)
        if actor.worker
        else None,
        latest_snapshot=SnapshotOfActor(
            generation=actor.latest_snapshot.generation,
            scope=actor.latest_snapshot.scope,
            uri=actor.latest_snapshot.uri,
            state=actor.latest_snapshot.state,
        )
        if actor.latest_snapshot
        else None,
        pinned_node=actor.pinned_node,
        local_snapshot=SnapshotOfActor(
            generation=actor.local_snapshot.generation,
            scope=actor.local_snapshot.scope,
            uri=actor.local_snapshot.uri,
            state=actor.local_snapshot.state,
        )
        if actor.local_snapshot
        else None,
        upload_pending=actor.upload_pending,
        idle=idle_view(actor),
        egress=None if actor.egress_policy is None else actor.egress_policy.document(),
        operation=actor.operation,
        last_error=actor.last_error,
        created_at=actor.created_at,
        updated_at=actor.updated_at,
    )


def pull_view(pull: ImagePull) -> ImagePullPublic:
    """The API shape of a node's pull of an image."""
    progress = pull.progress
    return ImagePullPublic(node=pull.node, image=pull.image, state=progress.state.value, layers=progress.layers,
                           bytes_total=progress.bytes_total, bytes_done=progress.bytes_done,
                           message=progress.message, text=progress.text(), updated_at=pull.updated_at)  # fmt: skip


def template_view(template: TemplateRecord) -> TemplatePublic:
    """The API shape of a template."""
    return TemplatePublic(
        atespace=template.atespace,
        name=template.name,
        spec=template.spec.document(),
        phase=template.phase,
        reason=template.reason,
        golden_snapshot=template.golden_snapshot_id,
        created_at=template.created_at,
    )


def worker_view(worker: WorkerRecord) -> WorkerPublic:
    """The API shape of a worker; `actors` lists `<atespace>/<name>` of its actor placements."""
    return WorkerPublic(
        pool=worker.pool,
        name=worker.name,
        node=worker.node,
        ip=worker.ip,
        sandbox_class=worker.sandbox_class,
        labels=worker.labels,
        state=worker.state,
        state_reason=worker.state_reason if worker.state != WorkerState.ACTIVE else None,
        places=worker.places,
        used_places=len(worker.holders),
        cpu_millis=worker.cpu_millis,
        memory_bytes=worker.memory_bytes,
        actors=[h.split("/", 1)[1] for h in worker.holders if h.startswith("actor/")],
    )


def encode_page_token(key: tuple[str, str] | None) -> str | None:
    """An opaque token for the page after `key`."""
    if key is None:
        return None
    return base64.urlsafe_b64encode(json.dumps(list(key)).encode()).decode()


def decode_page_token(token: str | None) -> tuple[str, str] | None:
    """The key a token stands for. Raises InvalidArgument for a token this API did not issue."""
    if not token:
        return None
    try:
        atespace, name = json.loads(base64.urlsafe_b64decode(token.encode()))
        return check_label_name(atespace), check_label_name(name)
    except (ValueError, TypeError) as error:
        raise InvalidArgument(
            "page_token is not a token this API issued; pass next_page_token from the previous page",
            {"field": "page_token"},
        ) from error


def tag_view(tag: TagRecord) -> TagPublic:
    """The API shape of a tag."""
    return TagPublic(
        atespace=tag.atespace, name=tag.name, source_actor=tag.source_actor, generation=tag.generation,
        scope=tag.scope, created_at=tag.created_at,
    )  # fmt: skip


def operation_view(record: OperationRecord) -> OperationPublic:
    """The API shape of an operation record; duration in seconds once finished."""
    duration = (record.finished_at - record.started_at).total_seconds() if record.finished_at else None
    return OperationPublic(
        operation_id=record.operation_id, operation=record.operation, outcome=record.outcome, worker=record.worker,
        error=record.error, started_at=record.started_at, finished_at=record.finished_at, duration_seconds=duration,
        reason=record.reason,
    )  # fmt: skip
