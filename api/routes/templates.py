"""/v1/atespaces/{atespace}/templates: create (starts GoldenSnapshot), get, list, delete."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

from api.access.guard import needs
from api.deps import SettingsDep, StoreDep, TemporalDep
from api.egress import check_credential_secrets
from api.errors import InvalidArgument
from api.images import pin_images
from api.names import check_name
from api.operations import search_attributes
from api.pull_secrets import template_credentials
from api.schemas import TemplateCreate, TemplatePublic
from api.views import pull_view, template_view
from domain.access import Permission
from domain.image_references import is_registry_reference
from domain.locations import is_within
from domain.operations.golden import GoldenSnapshotInput, GoldenSnapshotResult
from domain.registry_credentials import pull_secret_names
from domain.states import Operation
from domain.templates import ActorTemplateSpec
from domain.temporal import TASK_QUEUE, WORKFLOW_TASK_TIMEOUT, template_workflow_id

log = logging.getLogger("ate.api")
router = APIRouter(prefix="/v1/atespaces/{atespace}/templates", tags=["templates"])


@router.post("", status_code=201, **needs(Permission.TEMPLATES_MANAGE))
async def create_template(
    atespace: str,
    body: TemplateCreate,
    store: StoreDep,
    temporal: TemporalDep,
    settings: SettingsDep,
    request: Request,
    wait: bool = False,
) -> TemplatePublic:
    """Create an actor template and start its GoldenSnapshot workflow.

    With `?wait=true`, returns once the template is Ready or Failed.
    """
    check_name("name", body.name)
    spec = body.spec.model_dump(mode="json", exclude_none=True)
    allowed = settings.allowed_snapshot_locations
    location = spec.setdefault("snapshotConfig", {}).setdefault("storageLocation", settings.snapshot_location)
    if not any(is_within(location, root) for root in allowed):
        roots = " or ".join(allowed)
        raise InvalidArgument(
            f"spec.snapshotConfig.storageLocation {location!r} is outside the snapshot stores of this "
            f"cluster; use {roots} or a location below one (or leave it out for {settings.snapshot_location})",
            {"field": "spec.snapshotConfig.storageLocation"},
        )
    # every actor of the template runs the same bits
    credentials = await template_credentials(store, getattr(request.app.state, "secret_box", None), atespace,
                                             pull_secret_names(spec))  # fmt: skip
    await pin_images(spec, settings.insecure_registries, settings.allowed_registries, credentials)
    parsed = ActorTemplateSpec.from_document(spec)
    await check_credential_secrets(store, atespace, parsed.egress, "spec.egress")
    await store.templates.create(atespace, body.name, parsed)
    handle = await temporal.start_workflow(
        Operation.GOLDEN_SNAPSHOT.value,
        GoldenSnapshotInput(atespace=atespace, template=body.name),
        id=template_workflow_id(atespace, body.name),
        task_queue=TASK_QUEUE,
        id_conflict_policy=WorkflowIDConflictPolicy.TERMINATE_EXISTING,
        task_timeout=WORKFLOW_TASK_TIMEOUT,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        search_attributes=search_attributes(atespace, body.name, Operation.GOLDEN_SNAPSHOT),
        result_type=GoldenSnapshotResult,
    )
    if wait:
        await handle.result()
    return template_view(await store.templates.get(atespace, body.name))


@router.get("", **needs(Permission.TEMPLATES_READ))
async def list_templates(atespace: str, store: StoreDep) -> dict[str, list[TemplatePublic]]:
    """The templates of an atespace."""
    return {"items": [template_view(t) for t in await store.templates.of_atespace(atespace)]}


@router.get("/{name}", **needs(Permission.TEMPLATES_READ))
async def get_template(atespace: str, name: str, store: StoreDep) -> TemplatePublic:
    """One template; while it is Pending, with the nodes' pulls of its registry images (`pulls`)."""
    template = await store.templates.get(atespace, name)
    view = template_view(template)
    if template.phase == "Pending":
        images = [c.image for c in template.spec.containers if is_registry_reference(c.image)]
        view.pulls = [pull_view(p) for p in await store.image_pulls.of_images(images)]
    return view


@router.delete("/{name}", status_code=204, **needs(Permission.TEMPLATES_MANAGE))
async def delete_template(atespace: str, name: str, store: StoreDep) -> Response:
    """Delete a template no actor uses."""
    await store.templates.delete(atespace, name)
    return Response(status_code=204)
