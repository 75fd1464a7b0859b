"""Settings of the `ate api-server` process (environment prefix `ATE_`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from api.limits import DEFAULT_MAX_REQUEST_BYTES
from domain.locations import check_storage_location
from serving.protocol import DEFAULT_HEAD_TIMEOUT_SECONDS, DEFAULT_MAX_HEAD_BYTES


class ApiSettings(BaseSettings):
    """Where the API listens and finds Postgres and Temporal; default snapshot location."""

    model_config = SettingsConfigDict(env_prefix="ATE_")

    host: str = "127.0.0.1"
    port: int = 8080
    database_url: str = "postgresql://postgres@127.0.0.1:5432/ate"
    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    snapshot_location: str = f"file://{Path('.ate/snapshots').absolute()}"
    """Where templates' snapshots go by default: file:///<path>, s3://<bucket>/<prefix>, gs://... or
    az://... (domain.locations)."""
    other_snapshot_locations: list[str] = []
    """Further locations a template's own storageLocation may lie in (besides snapshot_location)."""
    resume_timeout_seconds: float = 30.0
    suspend_timeout_seconds: float = 60.0
    max_request_bytes: int = Field(default=DEFAULT_MAX_REQUEST_BYTES, ge=1024)
    """The largest request body, in bytes; a larger one is refused with 413 before it is read."""
    max_head_bytes: int = Field(default=DEFAULT_MAX_HEAD_BYTES, ge=1024)
    """The largest request head (request line and headers), in bytes; a larger one gets 431."""
    head_timeout_seconds: float = Field(default=DEFAULT_HEAD_TIMEOUT_SECONDS, gt=0)
    """Seconds a client may take to send a request head; a slower one is disconnected."""

    @field_validator("snapshot_location")
    @classmethod
    def _location(cls, value: str) -> str:
        return check_storage_location(value)

    @field_validator("other_snapshot_locations")
    @classmethod
    def _locations(cls, values: list[str]) -> list[str]:
        return [check_storage_location(v) for v in values]

    @property
    def allowed_snapshot_locations(self) -> list[str]:
        """Every location a template's snapshots may lie in (the default first)."""
        return [self.snapshot_location, *self.other_snapshot_locations]

    def redacted(self) -> dict[str, object]:
        """The settings with the database password hidden, for the start-up log."""
        values = self.model_dump()
        url = str(values["database_url"])
        if "@" in url and ":" in url.split("@", 1)[0].split("//", 1)[-1]:
            scheme, rest = url.split("//", 1)
            user = rest.split(":", 1)[0]
            values["database_url"] = f"{scheme}//{user}:***@{rest.split('@', 1)[1]}"
        return values
