"""Settings of the `ate api-server` process (environment prefix `ATE_`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from api.limits import DEFAULT_MAX_REQUEST_BYTES
from domain.access import Grant, Role
from domain.idle import IDLE_CHECK_SECONDS
from domain.liveness import LIVENESS_CHECK_SECONDS, NODE_LEASE_SECONDS, UNREACHABLE_GRACE_SECONDS
from domain.locations import check_storage_location
from domain.logs import DEFAULT_LOG_BYTES_PER_ACTOR
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
    node_lease_seconds: float = Field(default=NODE_LEASE_SECONDS, gt=0)
    """A node without a heartbeat for this long is lost: its workers UNAVAILABLE, its RUNNING actors
    UNREACHABLE (domain/liveness.py). Keep it a few of the atelets' heartbeat intervals."""
    unreachable_grace_seconds: float = Field(default=UNREACHABLE_GRACE_SECONDS, ge=0)
    """How long an UNREACHABLE actor waits for its node to answer again (then RUNNING, memory
    intact) before it is CRASHED."""
    liveness_check_seconds: float = Field(default=LIVENESS_CHECK_SECONDS, gt=0)
    """How often silent nodes and expired graces are looked for."""
    idle_check_seconds: float = Field(default=IDLE_CHECK_SECONDS, gt=0, le=60)
    """How often actors whose idle policy is due are looked for (api.idle)."""
    allowed_registries: list[str] = []
    """The registries (`host` or `host:port`) template images may come from; empty: any. A
    template naming another is refused before any registry is asked (api.images)."""
    insecure_registries: list[str] = []
    """Registries (`host[:port]`) template images may come from over plain HTTP or unverified TLS,
    besides those on loopback (api.images); give the atelets the same list."""
    operation_history_days: float = Field(default=30.0, gt=0)
    """How long a finished operation stays in an actor's history (`ate describe actor`, the events
    of `ate logs`); older ones are pruned every 10 minutes (api.history_retention)."""
    operation_history_per_actor: int = Field(default=1000, ge=10)
    """How many finished operations each actor's history keeps at most (its newest)."""
    log_bytes_per_actor: int = Field(default=DEFAULT_LOG_BYTES_PER_ACTOR, ge=64 * 1024)
    """How much of each actor's output is kept for `ate logs`: its newest lines up to this many
    bytes (older ones are dropped as new ones arrive; all go when the actor is deleted)."""
    resume_timeout_seconds: float = 30.0
    suspend_timeout_seconds: float = 60.0
    max_request_bytes: int = Field(default=DEFAULT_MAX_REQUEST_BYTES, ge=1024)
    """The largest request body, in bytes; a larger one is refused with 413 before it is read."""
    max_head_bytes: int = Field(default=DEFAULT_MAX_HEAD_BYTES, ge=1024)
    """The largest request head (request line and headers), in bytes; a larger one gets 431."""
    head_timeout_seconds: float = Field(default=DEFAULT_HEAD_TIMEOUT_SECONDS, gt=0)
    """Seconds a client may take to send a request head; a slower one is disconnected."""
    database_timeout_seconds: float = Field(default=10.0, gt=0)
    """Seconds a request waits for PostgreSQL (one statement, a new connection) before it is
    answered 503 naming the database; a frozen server answers after about twice this (asyncpg's
    cancel request waits as long). Without the bound a frozen database hung requests 30-60 s."""

    bootstrap_token_file: Path | None = None
    """A file holding the bootstrap token (at least 32 characters): a cluster-admin credential for
    creating the first tokens (`ate dev` writes one; on Kubernetes it comes from a Secret)."""
    bootstrap_token: str | None = None
    """The bootstrap token itself, when not in a file (env ATE_BOOTSTRAP_TOKEN)."""
    oidc_issuer: str | None = None
    """An OIDC issuer whose JWTs are accepted as bearer tokens (its `iss`), e.g.
    https://accounts.example.com. Unset: only ate tokens."""
    oidc_audience: str = "ate"
    """The `aud` the issuer puts in tokens meant for ate."""
    oidc_jwks_url: str | None = None
    """Where the issuer's signing keys are; unset: from its /.well-known/openid-configuration."""
    oidc_username_claim: str = "sub"
    """The claim that names the principal (shown in logs and as tokens' creator)."""
    oidc_groups_claim: str = "groups"
    """The claim that carries the principal's groups (a list of strings)."""
    oidc_group_grants: dict[str, list[str]] = {}
    """Grants per OIDC group, e.g. {"platform": ["cluster-admin"], "demo-devs": ["operator:demo"]}
    (env ATE_OIDC_GROUP_GRANTS, JSON)."""
    secret_keys_file: Path | None = None
    """The key ring that seals secrets (`domain.secrets.parse_secret_keys`: one `<key id> <base64
    of 32 bytes>` per line, the primary first); on Kubernetes a mounted Secret. Unset, with
    `secret_keys` unset too: no secrets (their routes answer 503 saying how to set it)."""
    secret_keys: str | None = None
    """The key ring's text itself, when not in a file (env ATE_SECRET_KEYS; a comma separates keys)."""
    node_ca_file: Path | None = None
    """The CA that signs node certificates: node registrations are accepted only when signed by a
    certificate it issued (atelet/registration.py)."""

    @field_validator("snapshot_location")
    @classmethod
    def _location(cls, value: str) -> str:
        return check_storage_location(value)

    @field_validator("oidc_group_grants")
    @classmethod
    def _group_grants(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for group, grants in value.items():
            for grant in grants:
                try:
                    parsed = Grant.parse(grant)
                except ValueError as error:
                    raise ValueError(f"oidc_group_grants[{group!r}]: {error}") from None
                if parsed.role == Role.NODE:
                    raise ValueError(f"oidc_group_grants[{group!r}]: node grants come from node certificates")
        return value

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
        for hidden in ("bootstrap_token", "secret_keys"):
            if values.get(hidden):
                values[hidden] = "***"
        url = str(values["database_url"])
        if "@" in url and ":" in url.split("@", 1)[0].split("//", 1)[-1]:
            scheme, rest = url.split("//", 1)
            user = rest.split(":", 1)[0]
            values["database_url"] = f"{scheme}//{user}:***@{rest.split('@', 1)[1]}"
        return values
