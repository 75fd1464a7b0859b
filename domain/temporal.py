"""Names ate's workflows share with Temporal: the task queue, the workflow task timeout, the
search attributes and the workflow IDs that are the per-actor (and per-template) locks.
"""

from __future__ import annotations

from datetime import timedelta

TASK_QUEUE = "ate-control"
"""The Temporal task queue every ate workflow and activity runs on."""


WORKFLOW_TASK_TIMEOUT = timedelta(seconds=3)
"""Workflow task timeout of every ate workflow, child workflows included (the server default is
10 s): how long a workflow waits after its worker died before another worker takes it over.
A task scheduled after the worker died (say, when an activity it ran elsewhere finished) first
waits out that worker's sticky queue, which the Temporal worker sets to this too
(`sticky_queue_schedule_to_start_timeout`; the SDK's default is 10 s)."""


SEARCH_ATTRIBUTES = ("AteAtespace", "AteActor", "AteOperation")
"""Keyword search attributes set on every workflow (registered on the Temporal server)."""


SNAPSHOT_GC_WORKFLOW_ID = "snapshot-gc"
"""The one SnapshotGarbageCollection workflow of a namespace."""


def template_workflow_id(atespace: str, template: str) -> str:
    """Workflow ID (and placement holder) of a template's GoldenSnapshot workflow."""
    return f"template/{atespace}/{template}"


def upload_workflow_id(atespace: str, name: str, local_snapshot_id: int) -> str:
    """The ID of the UploadSnapshot workflow of one local snapshot (it holds no per-actor lock)."""
    return f"upload/{atespace}/{name}/{local_snapshot_id}"


def search_attribute_values(atespace: str, name: str, operation: str) -> dict[str, str]:
    """The values of `AteAtespace`, `AteActor` and `AteOperation` for a workflow acting on
    (atespace, name) with `operation` (a workflow type name)."""
    return dict(zip(SEARCH_ATTRIBUTES, (atespace, name, operation), strict=True))
