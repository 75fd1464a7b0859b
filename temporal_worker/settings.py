"""Settings of the `ate worker` process (environment prefix `ATE_`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from temporal_worker.namespace_retention import DEFAULT_RETENTION_DAYS, check_retention_days


class WorkerSettings(BaseSettings):
    """Where the Temporal worker finds Postgres and Temporal, and how much it runs at once.

    ``atelet_client_tls_cert`` / ``_key`` / ``_ca`` (``ATE_ATELET_CLIENT_TLS_CERT``, ...): PEM files
    of the control plane's client certificate (CN ``ate-control-plane``), its key, and the CA that
    issued the nodes' certificates; required, as atelets take calls only over mutual TLS.
    """

    model_config = SettingsConfigDict(env_prefix="ATE_")

    database_url: str = "postgresql://postgres@127.0.0.1:5432/ate"
    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    max_concurrent_workflow_tasks: int = 500
    max_concurrent_local_activities: int = 500
    max_cached_workflows: int = 2000
    metrics_listen: str = "127.0.0.1:9001"
    snapshot_gc_interval_seconds: float = 60.0
    snapshot_gc_min_age_seconds: float = 60.0
    temporal_retention_days: int = DEFAULT_RETENTION_DAYS
    """How long Temporal keeps a closed workflow's history (`ATE_TEMPORAL_RETENTION_DAYS`, 1..90;
    `temporal_worker.namespace_retention`)."""
    router_url: str | None = None
    """Where wakes (schedules) send their requests: a router's base URL (`ATE_ROUTER_URL`)."""
    atelet_client_tls_cert: Path | None = None
    atelet_client_tls_key: Path | None = None
    atelet_client_tls_ca: Path | None = None

    @field_validator("temporal_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        return check_retention_days(value)
