"""A small synchronous client of the ate REST API (docs/rest-api.md).

It turns every failure into one of two exceptions the CLI knows how to print: `ApiError` (the
server answered with the error JSON `{"reason", "message", "details"}`) and `ApiUnreachable`
(nothing answered at the server URL).
"""

import base64
import contextlib
import json as json_module
from collections.abc import Iterator
from typing import Any, Self
from urllib.parse import quote

import httpx

from domain.reasons import Reason

DEFAULT_SERVER = "http://127.0.0.1:8080"
"""Where `ate dev` serves the API; overridden by `--server` / `ATE_SERVER` or the config's context
(ate.cli.config)."""

DEFAULT_TIMEOUT = 30.0
"""Seconds to wait for an ordinary request."""


class ApiError(Exception):
    """The API answered with an error status.

    Attributes:
        status: The HTTP status code.
        reason: The machine-readable reason (`NotFound`, `AlreadyExists`, ...).
        message: The human-readable message, printed as `error: <message>`.
        details: Extra details from the server.
    """

    def __init__(self, status: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.details = details or {}


class ApiUnreachable(ApiError):
    """Nothing answered at the API URL (connection refused, DNS failure, timeout)."""

    def __init__(self, server: str, cause: str = "") -> None:
        message = f"cannot reach the ate API at {server}: is 'ate dev' running?"
        super().__init__(0, Reason.UNREACHABLE, message, {"cause": cause} if cause else None)


def _segment(value: str) -> str:
    """Quote one path segment."""
    return quote(value, safe="")


def _error_from_response(response: httpx.Response) -> ApiError:
    """Build an `ApiError` from an error response, JSON or not."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return ApiError(response.status_code, str(body.get("reason", "")), body["message"], body.get("details"))
    if isinstance(body, dict) and "detail" in body:  # FastAPI's own validation errors
        return ApiError(response.status_code, Reason.INVALID_ARGUMENT, f"HTTP {response.status_code}: {body['detail']}")
    text = response.text.strip() or response.reason_phrase
    return ApiError(response.status_code, "", f"HTTP {response.status_code}: {text}")


class ApiClient:
    """Calls the ate REST API under `/v1`.

    Args:
        server: Base URL of the API server, e.g. `http://127.0.0.1:8080`.
        timeout: Default seconds per request.
        token: The bearer token sent with every request, or None.
    """

    def __init__(self, server: str = DEFAULT_SERVER, timeout: float = DEFAULT_TIMEOUT, token: str | None = None) -> None:
        self.server = server.rstrip("/")
        self.token = token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.server, timeout=timeout, headers=headers)

    def close(self) -> None:
        """Close the underlying connections."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _transport_errors(self) -> Iterator[None]:
        """httpx's failures to reach or hear the server, as `ApiUnreachable` or `ApiError`."""
        try:
            yield
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise ApiUnreachable(self.server, str(exc)) from exc
        except httpx.TimeoutException as exc:
            raise ApiError(0, Reason.TIMEOUT, f"the ate API at {self.server} did not answer in time") from exc
        except httpx.TransportError as exc:
            raise ApiError(0, "Transport", f"talking to the ate API at {self.server} failed: {exc}") from exc

    def request_object(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """`request` for endpoints that answer a JSON object."""
        body = self.request(method, path, **kwargs)
        return body if isinstance(body, dict) else {}

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Send one request and return the decoded JSON body (None for an empty body).

        Args:
            method: HTTP method.
            path: Path below the server URL, e.g. `/v1/atespaces`.
            json: JSON body, if any.
            params: Query parameters; None values are dropped.
            timeout: Seconds for this request, if not the default.

        Returns:
            The decoded JSON body, or None when the body is empty.

        Raises:
            ApiError: The server answered with an error status.
            ApiUnreachable: Nothing answered at the server URL.
        """
        query = {k: v for k, v in (params or {}).items() if v is not None}
        kwargs: dict[str, Any] = {"json": json, "params": query}
        if timeout is not None:
            kwargs["timeout"] = timeout
        with self._transport_errors():
            response = self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            error = _error_from_response(response)
            if response.status_code == 401 and not self.token:
                error.message += " (no token configured: set ATE_TOKEN, or a context in the ate config; see `ate config`)"
            raise error
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise ApiError(
                response.status_code, Reason.INTERNAL, f"the ate API answered with non-JSON: {response.text[:200]}"
            ) from exc

    def paginate(
        self, path: str, params: dict[str, Any] | None = None, page_size: int = 500
    ) -> Iterator[dict[str, Any]]:
        """Yield every item of a paginated list, following `next_page_token`.

        Args:
            path: The list endpoint.
            params: Extra query parameters.
            page_size: Items per page.

        Yields:
            Each item of each page.
        """
        token: str | None = None
        while True:
            page = self.request("GET", path, params={**(params or {}), "page_size": page_size, "page_token": token})
            yield from page.get("items") or []
            token = page.get("next_page_token")
            if not token:
                return

    # Access

    def create_token(self, name: str, grants: list[str], expires_in_seconds: int | None) -> dict[str, Any]:
        """Create a token; the answer holds its secret (`token`), shown this once."""
        body = {"name": name, "grants": grants, "expires_in_seconds": expires_in_seconds}
        return self.request_object("POST", "/v1/tokens", json=body)

    def list_tokens(self) -> list[dict[str, Any]]:
        """The tokens the caller may manage."""
        return (self.request("GET", "/v1/tokens") or {}).get("items") or []

    def delete_token(self, token_id: str) -> None:
        """Revoke a token."""
        self.request("DELETE", f"/v1/tokens/{_segment(token_id)}")

    # Secrets

    def create_secret(self, atespace: str, name: str, value: bytes) -> dict[str, Any]:
        """Create an opaque secret; the answer carries its metadata, never its value. Text that
        is UTF-8 goes as `value`, other bytes as `value_base64`."""
        try:
            body: dict[str, Any] = {"name": name, "value": value.decode()}
        except UnicodeDecodeError:
            body = {"name": name, "value_base64": base64.b64encode(value).decode()}
        return self.request_object("POST", f"/v1/atespaces/{_segment(atespace)}/secrets", json=body)

    def create_registry_secret(self, atespace: str, name: str, registry: str, username: str,
                               password: str) -> dict[str, Any]:  # fmt: skip
        """Create a registry secret (a pull secret for `registry`, `host[:port]`)."""
        body = {"name": name, "type": "registry", "registry": registry, "username": username, "password": password}
        return self.request_object("POST", f"/v1/atespaces/{_segment(atespace)}/secrets", json=body)

    def list_snapshots(self, atespace: str, actor: str | None = None) -> list[dict[str, Any]]:
        """An atespace's snapshots (one actor's, when given), by owner and newest first."""
        params = {"actor": actor} if actor else None
        return (self.request("GET", f"/v1/atespaces/{_segment(atespace)}/snapshots", params=params) or {}).get(
            "items") or []  # fmt: skip

    def get_snapshot(self, atespace: str, snapshot_id: int) -> dict[str, Any]:
        """One snapshot, with its files."""
        return self.request_object("GET", f"/v1/atespaces/{_segment(atespace)}/snapshots/{snapshot_id}")

    def list_secrets(self, atespace: str) -> list[dict[str, Any]]:
        """An atespace's secrets (names and metadata)."""
        return (self.request("GET", f"/v1/atespaces/{_segment(atespace)}/secrets") or {}).get("items") or []

    def get_secret(self, atespace: str, name: str) -> dict[str, Any]:
        """One secret's metadata."""
        return self.request_object("GET", f"/v1/atespaces/{_segment(atespace)}/secrets/{_segment(name)}")

    def delete_secret(self, atespace: str, name: str) -> None:
        """Delete a secret."""
        self.request("DELETE", f"/v1/atespaces/{_segment(atespace)}/secrets/{_segment(name)}")

    def whoami(self) -> dict[str, Any]:
        """The caller's name and grants, as the API sees them."""
        return self.request_object("GET", "/v1/whoami")

    # Atespaces

    def create_atespace(self, name: str) -> dict[str, Any]:
        """Create an atespace."""
        return self.request_object("POST", "/v1/atespaces", json={"name": name})

    def list_atespaces(self) -> list[dict[str, Any]]:
        """List every atespace."""
        return (self.request("GET", "/v1/atespaces") or {}).get("items") or []

    def get_atespace(self, name: str) -> dict[str, Any]:
        """Get one atespace."""
        return self.request_object("GET", f"/v1/atespaces/{_segment(name)}")

    def delete_atespace(self, name: str) -> None:
        """Delete an empty atespace."""
        self.request("DELETE", f"/v1/atespaces/{_segment(name)}")

    # Templates

    def create_template(
        self, atespace: str, name: str, spec: dict[str, Any], *, wait: bool, timeout: float = 600.0
    ) -> dict[str, Any]:
        """Create an actor template; with `wait`, the server answers once it is Ready or Failed."""
        return self.request_object(
            "POST",
            f"/v1/atespaces/{_segment(atespace)}/templates",
            json={"name": name, "spec": spec},
            params={"wait": "true" if wait else None},
            timeout=timeout if wait else None,
        )

    def list_templates(self, atespace: str) -> list[dict[str, Any]]:
        """List the templates of an atespace."""
        return (self.request("GET", f"/v1/atespaces/{_segment(atespace)}/templates") or {}).get("items") or []

    def get_template(self, atespace: str, name: str) -> dict[str, Any]:
        """Get one template."""
        return self.request_object("GET", f"/v1/atespaces/{_segment(atespace)}/templates/{_segment(name)}")

    def delete_template(self, atespace: str, name: str) -> None:
        """Delete a template no actor uses."""
        self.request("DELETE", f"/v1/atespaces/{_segment(atespace)}/templates/{_segment(name)}")

    # Actors

    def create_actor(
        self,
        atespace: str,
        name: str,
        template: str | None,
        worker_selector: dict[str, str],
        from_tag: str | None = None,
        idle: list[dict[str, Any]] | None = None,
        egress: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Create an actor (SUSPENDED), from a template or from a tag `<atespace>/<tag>`, with its
        own idle policy `idle` (None: its template's; []: off for it) and its own egress policy
        `egress` (within its template's; None: its template's)."""
        body: dict[str, Any] = {"name": name, "worker_selector": worker_selector}
        if idle is not None:
            body["idle"] = idle
        if egress is not None:
            body["egress"] = egress
        if template is not None:
            body["template"] = template
        if from_tag is not None:
            body["from_tag"] = from_tag
        return self.request_object("POST", f"/v1/atespaces/{_segment(atespace)}/actors", json=body)

    def list_actors(self, atespace: str | None = None) -> list[dict[str, Any]]:
        """List actors of one atespace, or of all when `atespace` is None, following pagination."""
        if atespace is None:
            return list(self.paginate("/v1/actors"))
        return list(self.paginate(f"/v1/atespaces/{_segment(atespace)}/actors"))

    def fork_actor(
        self, atespace: str, source: str, name: str, generation: int | None = None, count: int | None = None
    ) -> list[dict[str, Any]]:
        """Create actors that start from actor `source`'s snapshot (its latest completed one, or
        kept `generation`): `name`, or `name-1`..`name-<count>`; returns them."""
        body: dict[str, Any] = {"name": name}
        if generation is not None:
            body["generation"] = generation
        if count is not None:
            body["count"] = count
        forked = self.request_object(
            "POST", f"/v1/atespaces/{_segment(atespace)}/actors/{_segment(source)}/forks", json=body
        )
        return list(forked.get("items") or [])

    def get_actor(self, atespace: str, name: str) -> dict[str, Any]:
        """Get one actor."""
        return self.request_object("GET", f"/v1/atespaces/{_segment(atespace)}/actors/{_segment(name)}")

    def delete_actor(self, atespace: str, name: str, force: bool = False) -> None:
        """Delete a SUSPENDED actor; `force` deletes from any state after a revert."""
        params = {"force": "true"} if force else None
        self.request(
            "DELETE", f"/v1/atespaces/{_segment(atespace)}/actors/{_segment(name)}", params=params, timeout=90.0
        )

    def revert_actor(
        self, atespace: str, name: str, timeout_seconds: float = 60.0, to_generation: int | None = None
    ) -> dict[str, Any]:
        """Revert an actor to its last COMPLETED snapshot (or to kept generation `to_generation`)
        and return it SUSPENDED."""
        body: dict[str, Any] = {"timeout_seconds": timeout_seconds}
        if to_generation is not None:
            body["to_generation"] = to_generation
        return self.request_object(
            "POST",
            f"/v1/atespaces/{_segment(atespace)}/actors/{_segment(name)}/revert",
            json=body,
            timeout=timeout_seconds + 15.0,
        )

    def tag_actor(self, atespace: str, name: str, tag: str) -> dict[str, Any]:
        """Tag the actor's latest COMPLETED snapshot."""
        return self.request_object(
            "POST", f"/v1/atespaces/{_segment(atespace)}/actors/{_segment(name)}/tags", json={"tag": tag}
        )

    def list_tags(self, atespace: str) -> list[dict[str, Any]]:
        """The tags of an atespace."""
        return self.request_object("GET", f"/v1/atespaces/{_segment(atespace)}/tags").get("items") or []

    def actor_operations(self, atespace: str, name: str, limit: int = 10) -> list[dict[str, Any]]:
        """The actor's last operations, newest first."""
        path = f"/v1/atespaces/{_segment(atespace)}/actors/{_segment(name)}/operations"
        return self.request_object("GET", path, params={"limit": limit}).get("items") or []

    def list_operations(self, atespace: str | None = None, actor: str | None = None) -> list[dict[str, Any]]:
        """Operations in flight."""
        params = {k: v for k, v in {"atespace": atespace, "actor": actor}.items() if v}
        return self.request_object("GET", "/v1/operations", params=params).get("items") or []

    def drain_node(self, node: str, deadline_seconds: float) -> dict[str, Any]:
        """Start draining a node."""
        return self.request_object(
            "POST", f"/v1/nodes/{_segment(node)}/drain", json={"deadline_seconds": deadline_seconds}
        )

    def undrain_node(self, node: str) -> dict[str, Any]:
        """End a node's drain."""
        return self.request_object("POST", f"/v1/nodes/{_segment(node)}/undrain")

    def resume_actor(self, atespace: str, name: str, timeout_seconds: float = 30.0) -> dict[str, Any]:
        """Resume an actor and return it RUNNING."""
        return self.request_object(
            "POST",
            f"/v1/atespaces/{_segment(atespace)}/actors/{_segment(name)}/resume",
            json={"timeout_seconds": timeout_seconds},
            timeout=timeout_seconds + 15.0,
        )

    def suspend_actor(
        self,
        atespace: str,
        name: str,
        timeout_seconds: float = 60.0,
        mode: str = "sync",
        request_timeout: float | None = None,
    ) -> dict[str, Any]:
        """Suspend an actor and return it SUSPENDED.

        `request_timeout` bounds the HTTP request (default: the operation's timeout + 15 s).
        """
        return self.request_object(
            "POST",
            f"/v1/atespaces/{_segment(atespace)}/actors/{_segment(name)}/suspend",
            json={"timeout_seconds": timeout_seconds, "mode": mode},
            timeout=request_timeout if request_timeout is not None else timeout_seconds + 15.0,
        )

    def pause_actor(self, atespace: str, name: str, timeout_seconds: float = 60.0) -> dict[str, Any]:
        """Pause an actor (its checkpoint stays on its node) and return it PAUSED."""
        return self.request_object(
            "POST",
            f"/v1/atespaces/{_segment(atespace)}/actors/{_segment(name)}/pause",
            json={"timeout_seconds": timeout_seconds},
            timeout=timeout_seconds + 15.0,
        )

    def freeze_actor(self, atespace: str, name: str, timeout_seconds: float = 60.0) -> dict[str, Any]:
        """Freeze an actor (its sandbox stops in place) and return it FROZEN."""
        return self.request_object(
            "POST",
            f"/v1/atespaces/{_segment(atespace)}/actors/{_segment(name)}/freeze",
            json={"timeout_seconds": timeout_seconds},
            timeout=timeout_seconds + 15.0,
        )

    def exec_in_actor(self, atespace: str, name: str, command: list[str], timeout_seconds: float = 60.0) -> dict[str, Any]:
        """Run `command` in a RUNNING actor's sandbox; returns `exit_code`, `stdout`, `stderr`,
        `ended`... once it ends (see `api.routes.exec`)."""
        return self.request_object(
            "POST",
            f"/v1/atespaces/{_segment(atespace)}/actors/{_segment(name)}/exec",
            json={"command": command, "timeout_seconds": timeout_seconds},
            timeout=timeout_seconds + 120.0,
        )

    def actor_logs(self, atespace: str, name: str, *, follow: bool = False, tail: int | None = None,
                   since: str | None = None) -> Iterator[dict[str, Any]]:  # fmt: skip
        """The actor's output and lifecycle events, oldest first, one record at a time
        (`{"type": "line", "time", "line", ...}` or `{"type": "event", "time", "event", ...}`,
        see `api.routes.logs`); with `follow` it goes on until the answer ends or the caller stops.

        Raises:
            ApiError, ApiUnreachable: as `request`.
        """
        params = {k: v for k, v in {"follow": "true" if follow else None, "tail": tail, "since": since}.items()
                  if v is not None}  # fmt: skip
        path = f"/v1/atespaces/{_segment(atespace)}/actors/{_segment(name)}/logs"
        timeout = httpx.Timeout(self._http.timeout.connect, read=None) if follow else None
        with self._transport_errors(), \
                self._http.stream("GET", path, params=params, timeout=timeout or self._http.timeout) as response:
            if response.status_code >= 400:
                response.read()
                raise _error_from_response(response)
            for line in response.iter_lines():
                if line.strip():
                    yield json_module.loads(line)

    def update_actor(self, atespace: str, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Replace the given fields of an actor (`worker_selector`, `idle`) and return it."""
        return self.request_object(
            "PATCH", f"/v1/atespaces/{_segment(atespace)}/actors/{_segment(name)}", json=changes
        )

    def create_schedule(self, atespace: str, actor: str, body: dict[str, Any]) -> dict[str, Any]:
        """Give an actor a schedule (`name`, `cron` or `every_seconds`, `time_zone`, `path`, `catchup`)."""
        return self.request_object(
            "POST", f"/v1/atespaces/{_segment(atespace)}/actors/{_segment(actor)}/schedules", json=body
        )

    def list_schedules(self, atespace: str, actor: str) -> list[dict[str, Any]]:
        """An actor's schedules."""
        answer = self.request_object("GET", f"/v1/atespaces/{_segment(atespace)}/actors/{_segment(actor)}/schedules")
        items: list[dict[str, Any]] = answer.get("items", [])
        return items

    def delete_schedule(self, atespace: str, actor: str, name: str) -> None:
        """Delete one schedule of an actor."""
        self.request(
            "DELETE", f"/v1/atespaces/{_segment(atespace)}/actors/{_segment(actor)}/schedules/{_segment(name)}"
        )

    # Workers

    def list_workers(self) -> list[dict[str, Any]]:
        """List every worker."""
        return (self.request("GET", "/v1/workers") or {}).get("items") or []
