"""Settings of the router process (``RouterSettings``, env prefix ``ATE_ROUTER_``)."""

from __future__ import annotations

from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""Largest WebSocket message relayed either way (uvicorn's default for the client side, used for
both; the nginx data path's control socket takes the same for the WebSockets it relays)."""

SESSIONS_END_SECONDS = 5.0
"""At shutdown, how long the open WebSockets and event streams get to finish closing."""


class RouterSettings(BaseSettings):
    """Everything the router reads from its environment or flags.

    Attributes:
        listen: ``host:port`` the proxy serves actor traffic on.
        metrics_listen: ``host:port`` of the Prometheus ``/metrics`` endpoint (kept off the
            proxy port, where every path belongs to actors).
        api_server: Base URL of the ate REST API.
        api_token_file: A file holding the router's bearer token for the API (a token with the
            ``router`` role: it resumes actors, reads templates and reviews callers' tokens).
        api_token: The token itself, when not in a file.
        database_url: Postgres DSN used only to LISTEN on ``ate_actor_changes``; falls back to
            ``ATE_DATABASE_URL``. Without it nothing is cached and every request resumes.
        domain: Domain of host-form targets ``<name>.<atespace>.actors.<domain>``.
        parked_request_budget_seconds: How long one request may wait for its actor to be
            RUNNING (resume, retries on busy actor or no capacity), in seconds.
        max_parked: How many requests may wait for actors at once; more get 503.
        upstream_connect_timeout_seconds: TCP connect timeout to a worker, in seconds.
        response_head_timeout_seconds: Seconds a worker may take from receiving a request head
            to sending its response head; then the client gets 504.
        idle_timeout_seconds: Longest silence, in seconds, of a client sending its body or of
            a worker sending its answer; then the request is cut off.
        request_timeout_seconds: Longest whole request, from its arrival to the end of its
            response, in seconds (parking included); then it is cut off.
        head_timeout_seconds: Seconds a client may take to send a request head (request line
            and headers) from opening its connection or starting the head; a slower one is
            disconnected (slowloris).
        max_head_bytes: Bytes a request head may have; a larger one gets 431 and is disconnected.
        data_path: What proxies the requests: ``python`` (this process) or ``nginx`` (nginx with
            its Lua module, supervised by this process, which keeps the control path; see
            router.nginx).
        nginx_workers: nginx worker processes (``--data-path nginx``).
        nginx_binary: The nginx program (``--data-path nginx``).
        nginx_run_dir: Directory for nginx.conf, sockets and temp files (None: a new temporary one).
        drain_timeout_seconds: When the control plane drains an actor before its checkpoint, how
            long its requests in flight may take to finish before they are cut off, in seconds.
        stop_grace_seconds: When the router stops (SIGTERM), how long its requests in flight
            may take to finish before they are cut off (a 503 where no answer began), in
            whole seconds; keep it below the pod's ``terminationGracePeriodSeconds``.
        replica_name: This replica's name towards the control plane (a DNS label); None makes
            one unique to the process (``router-<host>-<pid>-<hex>``).
        register_replica: Whether to register with the API and take part in drains (off only for tests
            and tools that run a router without an API).
        open_streams_keep_awake: What an open but silent WebSocket or event stream means for its
            actor's idleness (issue 27). False (the default): it counts as activity only while
            it moves bytes, so an actor whose only traffic is a silent open stream is idle (its
            idle action drains it, closing the stream with the drain's reason; the client
            connects again and resumes the actor). True: an open stream counts as a request in
            flight for as long as it is open (reported active at every heartbeat; an idle
            action's drain is refused as busy), so it keeps its actor awake.
    """

    model_config = SettingsConfigDict(env_prefix="ATE_ROUTER_", extra="ignore")

    listen: str = "127.0.0.1:8000"
    metrics_listen: str = "127.0.0.1:9000"
    api_server: str = "http://127.0.0.1:8080"
    api_token_file: Path | None = None
    api_token: str | None = None
    database_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("ATE_ROUTER_DATABASE_URL", "ATE_DATABASE_URL", "database_url"),
    )
    domain: str = "ate.local"
    parked_request_budget_seconds: float = Field(default=5.0, gt=0)
    max_parked: int = Field(default=1000, ge=0)
    upstream_connect_timeout_seconds: float = Field(default=5.0, gt=0)
    response_head_timeout_seconds: float = Field(default=120.0, gt=0)
    idle_timeout_seconds: float = Field(default=300.0, gt=0)
    request_timeout_seconds: float = Field(default=3600.0, gt=0)
    trusted_proxies: list[str] = Field(default_factory=list)

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, values: list[str]) -> list[str]:
        for value in values:
            try:
                ip_network(value, strict=False)
            except ValueError:
                raise ValueError(f"trusted_proxies: {value!r} is not a network such as 10.0.0.0/8 or 2001:db8::/32") from None
        return values

    @property
    def trusted_networks(self) -> tuple[IPv4Network | IPv6Network, ...]:
        """``trusted_proxies`` parsed."""
        return tuple(ip_network(value, strict=False) for value in self.trusted_proxies)
    head_timeout_seconds: float = Field(default=10.0, gt=0)
    max_head_bytes: int = Field(default=32 * 1024, ge=1024)
    data_path: Literal["python", "nginx"] = "python"
    nginx_workers: int = Field(default=1, ge=1, le=64)
    nginx_binary: str = "nginx"
    nginx_run_dir: Path | None = None
    drain_timeout_seconds: float = Field(default=10.0, ge=0, le=240)
    stop_grace_seconds: int = Field(default=10, ge=1, le=3600)
    replica_name: str | None = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    register_replica: bool = True
    open_streams_keep_awake: bool = False

    def read_api_token(self) -> str | None:
        """The API token, from ``api_token`` or ``api_token_file``.

        Raises:
            ValueError: the file is unreadable or empty.
        """
        if self.api_token_file is None:
            return self.api_token
        try:
            token = self.api_token_file.read_text().strip()
        except OSError as error:
            raise ValueError(f"api_token_file {self.api_token_file}: {error.strerror}") from None
        if not token:
            raise ValueError(f"api_token_file {self.api_token_file} is empty")
        return token

    def redacted(self) -> dict[str, object]:
        """Return the settings as a dict with the database password hidden.

        Returns:
            Field name to value; ``database_url`` has any password replaced by ``***``.
        """
        data = self.model_dump()
        if data.get("api_token"):
            data["api_token"] = "***"
        url = data.get("database_url")
        if isinstance(url, str) and "@" in url and ":" in url.split("@", 1)[0].split("//")[-1]:
            head, tail = url.split("@", 1)
            scheme_user = head.rsplit(":", 1)[0]
            data["database_url"] = f"{scheme_user}:***@{tail}"
        return data


def split_host_port(value: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """Split a ``host:port`` listen address.

    Args:
        value: ``"127.0.0.1:8000"``, ``"[::1]:8000"``, ``":8000"`` or ``"8000"``.
        default_host: Host used when the value has none.

    Returns:
        ``(host, port)``.

    Raises:
        ValueError: The port is missing or not an integer in 0..65535.
    """
    host, sep, port_text = value.rpartition(":")
    if not sep:
        host, port_text = "", value
    host = host.strip("[]") or default_host
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port out of range in {value!r}")
    return host, port
