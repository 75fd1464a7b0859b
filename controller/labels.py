"""The labels and names by which the controller finds what it owns."""

from __future__ import annotations

FIELD_MANAGER = "ate-controller"
"""The server-side apply field manager: only the fields it sets are its own."""

POOL_LABEL = "ate.dev/pool"
"""On every worker pod and Deployment: the WorkerPool it belongs to."""

MANAGED_BY = {"app.kubernetes.io/managed-by": "ate-controller", "app.kubernetes.io/part-of": "ate"}
"""On every object the controller creates."""

ATELET_PORT = 8085
ATELET_METRICS_PORT = 9085


def deployment_name(pool: str) -> str:
    """The Deployment of a WorkerPool's worker pods."""
    return f"ate-workers-{pool}"


def worker_name(pool: str) -> str:
    """The one worker of a worker pod (the atelet names its workers `<pool>-<i>`)."""
    return f"{pool}-0"
