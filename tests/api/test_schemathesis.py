"""Property-based requests to the real api-server, generated from its own OpenAPI document.

schemathesis (v4) builds valid and invalid requests for every operation the document lists
(path, query and body, in its coverage and fuzzing phases) and sends them over HTTP to a real
`ate api-server` on PostgreSQL and a Temporal dev server (tests/api/conftest.py), as a cluster
admin, and as node N itself for node N's registration and events. Every answer
must be below 500, and every 4xx body must be the one error format of `api.errors`:
`{"reason": <a reason whose status in STATUS_BY_REASON is the answer's>, "message": <text>,
"details": <object>}`.

Random path parameters almost never name something that exists, so a second run aims half of
its requests at real ones (atespace `demo`, template `web`, actor `c1`, node `n1`, made before
it). That run leaves out the operations that wait for a workflow (resume, suspend, pause,
revert, and `?wait=true` on templates): no Temporal worker runs here, so they would wait out
their timeout and answer 504, as documented (those routes' 404 and 400 paths are in the
first run); nor does it follow an actor's logs (`?follow=true` stays open until the client goes).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from api.app import create_app
from api.errors import STATUS_BY_REASON
from api.settings import ApiSettings
from tests.api.conftest import ApiServer
from tests.credentials import SuiteCredentials, headers_for

EXAMPLES_PER_OPERATION = 40
SEEDED = {"atespace": "demo", "name": "c1", "node": "n1"}
"""Path parameters that name what `seeded` made (templates' `name` is mapped to `web`)."""


WORKER = {"name": "default-0", "pool": "default", "ip": "10.99.0.2", "cpu_millis": 1000, "memory_bytes": 2**30}


class NotTheErrorFormat(AssertionError):
    """A 4xx answer whose body is not `{reason, message, details}`."""


def error_format(ctx: schemathesis.CheckContext, response: schemathesis.Response, case: schemathesis.Case[Any]) -> bool:
    """Every 4xx body is `{reason, message, details}` with a reason that maps to its status."""
    if not 400 <= response.status_code < 500:
        return True
    try:
        body: Any = response.json()
    except ValueError:
        raise NotTheErrorFormat(f"{response.status_code} body is not JSON: {response.text[:200]!r}") from None
    if not isinstance(body, dict) or set(body) != {"reason", "message", "details"}:
        raise NotTheErrorFormat(f"{response.status_code} body is not {{reason, message, details}}: {body!r}")
    if STATUS_BY_REASON.get(body["reason"]) != response.status_code:
        raise NotTheErrorFormat(f"reason {body['reason']!r} does not belong to status {response.status_code}")
    if not isinstance(body["message"], str) or not body["message"] or not isinstance(body["details"], dict):
        raise NotTheErrorFormat(f"message must be a non-empty string and details an object: {body!r}")
    return True


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document the api-server publishes at /openapi.json (built by the same code,
    without serving; `test_the_server_publishes_this_document` checks they are the same)."""
    return create_app(ApiSettings()).openapi()


schema = schemathesis.openapi.from_dict(openapi_document())
seeded_schema = (
    schemathesis.openapi.from_dict(openapi_document())
    .exclude(path_regex=r"/(resume|suspend|pause|freeze|revert)$")
    .exclude(path_regex=r"^/healthz$")
)


@seeded_schema.hook
def flatmap_path_parameters(context: schemathesis.HookContext, path_parameters: dict[str, Any] | None) -> Any:
    """Half of the requests name what exists."""
    if not path_parameters:
        return st.just(path_parameters)
    real = {k: SEEDED[k] for k in path_parameters if k in SEEDED}
    if context.operation is not None and "/templates/" in context.operation.path and "name" in real:
        real["name"] = "web"
    return st.sampled_from([path_parameters, {**path_parameters, **real}])


@seeded_schema.hook
def map_query(context: schemathesis.HookContext, query: dict[str, Any] | None) -> dict[str, Any] | None:
    """No template create waits for its golden snapshot (no worker builds it here), and no log
    read follows (a follow is an answer that stays open by design: its first part is the answer
    without it)."""
    if query and "wait" in query:
        query = {**query, "wait": "false"}
    if query and "follow" in query:
        query = {**query, "follow": "false"}
    return query


fuzzing = settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
    database=None,
)


def test_the_server_publishes_this_document(api_server: ApiServer, api_headers: dict[str, str]) -> None:
    assert httpx.get(f"{api_server.url}/openapi.json", headers=api_headers).json() == openapi_document()


@schema.parametrize()
@fuzzing
def test_no_server_error_and_every_client_error_in_the_one_format(
    case: schemathesis.Case[Any], api_server: ApiServer, api_headers: dict[str, str]
) -> None:
    case.call_and_validate(
        base_url=api_server.url,
        headers=headers_for(case.method, case.formatted_path),
        checks=[not_a_server_error, error_format],
        timeout=30,
    )


@pytest.fixture
def seeded(api_server: ApiServer, api_headers: dict[str, str]) -> None:
    """Atespace demo, its template web (its golden snapshot never builds: no worker), actor c1
    of it and node n1 with one worker, made again where an earlier request deleted them."""
    with httpx.Client(base_url=api_server.url, auth=SuiteCredentials(), timeout=30) as api:
        made = [
            api.post("/v1/atespaces", json={"name": "demo"}),
            api.post(
                "/v1/atespaces/demo/templates",
                json={"name": "web", "spec": {"containers": [{"name": "app", "image": "oci:app:v1", "port": 8080}]}},
            ),
            api.post("/v1/atespaces/demo/actors", json={"name": "c1", "template": "web"}),
            api.put(
                "/v1/nodes/n1",
                json={
                    "address": "127.0.0.1:1",
                    "workers": [WORKER],
                },
            ),
        ]
    for response in made:
        assert response.status_code in (200, 201, 409), response.text


@seeded_schema.parametrize()
@fuzzing
def test_no_server_error_on_what_exists(
    case: schemathesis.Case[Any], api_server: ApiServer, api_headers: dict[str, str], seeded: None
) -> None:
    case.call_and_validate(
        base_url=api_server.url,
        headers=headers_for(case.method, case.formatted_path),
        checks=[not_a_server_error, error_format],
        timeout=30,
    )
