"""How long Temporal keeps the history of a closed workflow in ate's namespace (issue 30: what grows
without end is bounded).

Every operation on an actor is a workflow, so a busy fleet closes many; Temporal deletes a closed
workflow's history after the namespace's retention. The worker sets it at start to
`ATE_TEMPORAL_RETENTION_DAYS` (default `DEFAULT_RETENTION_DAYS`) when the namespace says
otherwise. A server that refuses (no rights to update the namespace) is logged, not fatal: the
operator sets it there (`temporal operator namespace update --retention 7d NAMESPACE`).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from google.protobuf.duration_pb2 import Duration
from temporalio.api.namespace.v1 import NamespaceConfig
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, UpdateNamespaceRequest
from temporalio.client import Client

log = logging.getLogger(__name__)

DEFAULT_RETENTION_DAYS = 7
"""A week of closed operations in the Temporal UI: enough to look into last week's incident; the
actor's history in ate (`ate get operations`, the `operations` table) keeps 30 days."""

MIN_RETENTION_DAYS, MAX_RETENTION_DAYS = 1, 90
"""The range accepted (Temporal's own: at least a day; Temporal Cloud's upper bound: 90 days)."""


def check_retention_days(days: int) -> int:
    """`days` when within MIN_RETENTION_DAYS..MAX_RETENTION_DAYS.

    Raises:
        ValueError: outside it; the message names ATE_TEMPORAL_RETENTION_DAYS and the range.
    """
    if not MIN_RETENTION_DAYS <= days <= MAX_RETENTION_DAYS:
        raise ValueError(
            f"ATE_TEMPORAL_RETENTION_DAYS: {days} is outside {MIN_RETENTION_DAYS}..{MAX_RETENTION_DAYS} days"
        )
    return days


async def namespace_retention(client: Client, namespace: str) -> timedelta:
    """The namespace's workflow execution retention as it stands."""
    described = await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=namespace))
    return described.config.workflow_execution_retention_ttl.ToTimedelta()


async def ensure_retention(client: Client, namespace: str, days: int) -> bool:
    """Set `namespace`'s retention to `days` days unless it already is; whether it changed it.

    A refusal is logged and returns False (see the module's docstring).
    """
    wanted = timedelta(days=days)
    try:
        if await namespace_retention(client, namespace) == wanted:
            return False
        ttl = Duration()
        ttl.FromTimedelta(wanted)
        await client.workflow_service.update_namespace(
            UpdateNamespaceRequest(namespace=namespace, config=NamespaceConfig(workflow_execution_retention_ttl=ttl))
        )
        log.info("set the retention of Temporal namespace %s to %d days", namespace, days)
        return True
    except Exception as error:  # a refusal must not keep the worker from serving
        log.warning("could not set the retention of Temporal namespace %s to %d days: %s", namespace, days, error)
        return False
