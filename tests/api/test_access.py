"""Every REST route refuses a caller without a token (401) and a token without the route's
permission (403), and lets a token with it through; the expectations are written here by hand
from issue 11's role definitions, not read from the code's tables:

- viewer reads an atespace; operator also resumes, suspends, pauses, reverts and tags, and sees
  the names of its secrets (issue 28: names and metadata, never a value); admin also creates and
  deletes templates, actors, tokens and secrets of the atespace; user only reaches
  actors through the router (no REST route);
- cluster-viewer reads everything, workers too; cluster-operator also operates every actor and
  drains nodes; cluster-admin may do everything but speak for a node (atespaces included);
- router reads templates and actors, resumes actors, and asks for access reviews;
- node registration and node events come only from node certificates, never from a token; a
  node's certificate speaks for that node only (register, report, drain and undrain itself).

A route missing from ROUTES fails the walk, so a new route cannot ship without a decision.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from typing import Any

import asyncpg
import httpx
import pytest

from ate.dev.certificates import ensure_local_certificates
from atelet.node_identity import NodeCredentials
from tests.api.conftest import ApiProcess, api_process
from tests.credentials import node_token
from tests.tls import certificates

ATESPACE_ROLES = ("user", "viewer", "operator", "admin")
CLUSTER_ROLES = ("cluster-viewer", "cluster-operator", "cluster-admin")

ROUTES: dict[tuple[str, str], str] = {
    ("GET", "/v1/atespaces"): "viewer",
    ("POST", "/v1/atespaces"): "cluster-admin",
    ("GET", "/v1/atespaces/{atespace}"): "viewer",
    ("DELETE", "/v1/atespaces/{atespace}"): "cluster-admin",
    ("POST", "/v1/atespaces/{atespace}/templates"): "admin",
    ("GET", "/v1/atespaces/{atespace}/templates"): "viewer",
    ("GET", "/v1/atespaces/{atespace}/templates/{name}"): "viewer",
    ("DELETE", "/v1/atespaces/{atespace}/templates/{name}"): "admin",
    ("GET", "/v1/actors"): "viewer",
    ("GET", "/v1/atespaces/{atespace}/actors"): "viewer",
    ("POST", "/v1/atespaces/{atespace}/actors"): "admin",
    ("GET", "/v1/atespaces/{atespace}/actors/{name}"): "viewer",
    ("PATCH", "/v1/atespaces/{atespace}/actors/{name}"): "admin",
    ("DELETE", "/v1/atespaces/{atespace}/actors/{name}"): "admin",
    ("POST", "/v1/atespaces/{atespace}/actors/{name}/revert"): "operator",
    ("POST", "/v1/atespaces/{atespace}/actors/{name}/tags"): "operator",
    ("POST", "/v1/atespaces/{atespace}/actors/{name}/forks"): "admin",
    ("GET", "/v1/atespaces/{atespace}/tags"): "viewer",
    ("GET", "/v1/atespaces/{atespace}/actors/{name}/operations"): "viewer",
    ("POST", "/v1/atespaces/{atespace}/actors/{name}/resume"): "operator",
    ("POST", "/v1/atespaces/{atespace}/actors/{name}/suspend"): "operator",
    ("POST", "/v1/atespaces/{atespace}/actors/{name}/pause"): "operator",
    ("POST", "/v1/atespaces/{atespace}/actors/{name}/freeze"): "operator",
    ("POST", "/v1/atespaces/{atespace}/actors/{name}/exec"): "operator",
    ("GET", "/v1/atespaces/{atespace}/actors/{name}/logs"): "viewer",
    ("GET", "/v1/atespaces/{atespace}/snapshots"): "viewer",
    ("GET", "/v1/atespaces/{atespace}/snapshots/{snapshot_id}"): "viewer",
    ("POST", "/v1/atespaces/{atespace}/actors/{name}/schedules"): "admin",
    ("GET", "/v1/atespaces/{atespace}/actors/{name}/schedules"): "viewer",
    ("DELETE", "/v1/atespaces/{atespace}/actors/{name}/schedules/{schedule}"): "admin",
    ("GET", "/v1/workers"): "cluster-viewer",
    ("PUT", "/v1/nodes/{node}"): "node",
    ("POST", "/v1/nodes/{node}/events"): "node",
    ("POST", "/v1/nodes/{node}/logs"): "node",
    ("GET", "/v1/nodes/{node}/images"): "node",
    ("GET", "/v1/nodes/{node}/image-credentials"): "node",
    ("PUT", "/v1/nodes/{node}/pulls"): "node",
    ("GET", "/v1/nodes/{node}/workers/{worker}/actors/{atespace}/{name}"): "node",
    ("GET", "/v1/nodes/{node}/workers/{worker}/actors/{atespace}/{name}/egress"): "node",
    ("POST", "/v1/nodes/{node}/workers/{worker}/actors/{atespace}/{name}/suspend"): "node",
    ("PUT", "/v1/nodes/{node}/workers/{worker}/actors/{atespace}/{name}/idle"): "node",
    ("DELETE", "/v1/nodes/{node}/workers/{worker}/actors/{atespace}/{name}/idle"): "node",
    ("POST", "/v1/nodes/{node}/workers/{worker}/actors/{atespace}/{name}/wakes"): "node",
    ("GET", "/v1/nodes/{node}/workers/{worker}/actors/{atespace}/{name}/wakes"): "node",
    ("DELETE", "/v1/nodes/{node}/workers/{worker}/actors/{atespace}/{name}/wakes/{wake}"): "node",
    ("POST", "/v1/nodes/{node}/drain"): "cluster-operator",
    ("POST", "/v1/nodes/{node}/undrain"): "cluster-operator",
    ("GET", "/v1/operations"): "viewer",
    ("GET", "/v1/tokens"): "admin",
    ("POST", "/v1/tokens"): "admin",
    ("DELETE", "/v1/tokens/{token_id}"): "admin",
    ("POST", "/v1/atespaces/{atespace}/secrets"): "admin",
    ("GET", "/v1/atespaces/{atespace}/secrets"): "operator",
    ("GET", "/v1/atespaces/{atespace}/secrets/{name}"): "operator",
    ("DELETE", "/v1/atespaces/{atespace}/secrets/{name}"): "admin",
    ("POST", "/v1/accessreviews"): "router",
    ("GET", "/v1/routers"): "cluster-viewer",
    ("PUT", "/v1/routers/{replica}"): "router",
    ("DELETE", "/v1/routers/{replica}"): "router",
    ("POST", "/v1/routers/{replica}/drains/{drain_id}/ack"): "router",
    ("GET", "/v1/whoami"): "authenticated",
    ("GET", "/healthz"): "public",
}
"""The least role each route needs (`node`: only a node certificate; `router`: the router role
or cluster-admin)."""

ROUTER_ROUTES = {
    ("GET", "/v1/atespaces/{atespace}/templates"),
    ("GET", "/v1/atespaces/{atespace}/templates/{name}"),
    ("GET", "/v1/actors"),
    ("GET", "/v1/atespaces/{atespace}/actors"),
    ("GET", "/v1/atespaces/{atespace}/actors/{name}"),
    ("GET", "/v1/atespaces/{atespace}/tags"),
    ("GET", "/v1/atespaces/{atespace}/actors/{name}/operations"),
    ("GET", "/v1/atespaces/{atespace}/actors/{name}/schedules"),  # an actor read, like its operations
    ("GET", "/v1/operations"),
    ("POST", "/v1/atespaces/{atespace}/actors/{name}/resume"),
    ("POST", "/v1/accessreviews"),
    ("PUT", "/v1/routers/{replica}"),
    ("DELETE", "/v1/routers/{replica}"),
    ("POST", "/v1/routers/{replica}/drains/{drain_id}/ack"),
}
"""What the router role may call: reading actors and templates, resuming, access reviews, its
replica's heartbeat, drain acknowledgements and the release of its lease."""

PATH_VALUES = {
    "atespace": "walk",
    "name": "c1",
    "node": "n1",
    "token_id": "0123456789ab",
    "replica": "walk-router",
    "drain_id": "1",
    "schedule": "tick",
    "worker": "default-0",
    "wake": "tick",
    "snapshot_id": "1",
}
"""Path parameters of the walk: atespace `walk` (granted, then deleted, so nothing is changed by
the requests that pass), names that do not exist."""


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, api_database_url: str, temporal_address: str) -> Iterator[ApiProcess]:
    """An api-server process for this module (ApiProcess: its URL, a client per token)."""
    with api_process(tmp_path_factory.mktemp("api"), api_database_url, temporal_address) as running:
        yield running


def allowed(role: str, least: str, route: tuple[str, str]) -> bool:
    """Whether a token with `role` (on atespace walk, or cluster-wide) may call a route whose
    least role is `least`, by the rules in the module docstring."""
    if least == "authenticated":
        return True
    if least == "node":
        return False
    if role == "router":
        return route in ROUTER_ROUTES
    if least == "router":
        return role == "cluster-admin"
    if role in ATESPACE_ROLES:
        return least in ATESPACE_ROLES and ATESPACE_ROLES.index(role) >= ATESPACE_ROLES.index(least)
    if least in CLUSTER_ROLES:
        return CLUSTER_ROLES.index(role) >= CLUSTER_ROLES.index(least)
    covered = {"cluster-viewer": ("viewer",), "cluster-operator": ("viewer", "operator")}
    return role == "cluster-admin" or least in covered[role]


def create_token(api: ApiProcess, name: str, grants: list[str], **extra: Any) -> dict[str, Any]:
    with api.client() as http:
        answer = http.post("/v1/tokens", json={"name": name, "grants": grants, **extra}, headers=api.bootstrap)
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    return body


@pytest.fixture(scope="module")
def role_tokens(api: ApiProcess) -> dict[str, str]:
    """A token per role: atespace roles on `walk`, `user` of actor walk/c1, cluster roles. Then
    atespace walk is deleted, so the walk's requests find nothing to change."""
    with api.client() as http:
        assert http.post("/v1/atespaces", json={"name": "walk"}, headers=api.bootstrap).status_code == 201
    tokens = {role: create_token(api, f"walk-{role}", [f"{role}:walk"])["token"] for role in ATESPACE_ROLES}
    tokens["user-of-one-actor"] = create_token(api, "walk-user-c1", ["user:walk/c1"])["token"]
    for role in (*CLUSTER_ROLES, "router"):
        tokens[role] = create_token(api, f"walk-{role}", [role])["token"]
    with api.client() as http:
        assert http.delete("/v1/atespaces/walk", headers=api.bootstrap).status_code == 204
    return tokens


def operations(api: ApiProcess) -> list[tuple[str, str, dict[str, Any]]]:
    with api.client() as http:
        document = http.get("/openapi.json").json()
    return [(method.upper(), path, op) for path, item in document["paths"].items() for method, op in item.items()]


def call(http: httpx.Client, method: str, path: str, token: str | None) -> httpx.Response:
    url = path.format(**PATH_VALUES)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = {} if method in ("POST", "PUT", "PATCH") else None
    return http.request(method, url, json=body, headers=headers)


def assert_error_body(answer: httpx.Response, reason: str) -> str:
    body = answer.json()
    assert set(body) == {"reason", "message", "details"}, body
    assert body["reason"] == reason
    message: str = body["message"]
    return message


def test_every_route_declares_its_permission_and_has_an_expectation(api: ApiProcess) -> None:
    found = {(method, path): op.get("x-ate-permission") for method, path, op in operations(api)}
    assert set(found) == set(ROUTES), f"routes without an expectation here: {set(found) - set(ROUTES)}"
    undeclared = [route for route, permission in found.items() if not permission]
    assert undeclared == []


def test_no_token_is_401_and_a_bad_token_is_401(api: ApiProcess) -> None:
    with api.client() as http:
        for method, path, _ in operations(api):
            if ROUTES[(method, path)] == "public":
                assert call(http, method, path, None).status_code == 200
                continue
            for token in (None, "ate_0123456789ab_not-a-real-secret", "not-even-a-token", "a.b.c"):
                answer = call(http, method, path, token)
                assert answer.status_code == 401, (method, path, token, answer.text)
                assert answer.headers["www-authenticate"].startswith("Bearer")
                message = assert_error_body(answer, "Unauthenticated")
                if token is not None:
                    assert message == "the bearer token is not valid (unknown, expired or revoked)"


def test_each_role_gets_exactly_the_routes_it_should(api: ApiProcess, role_tokens: dict[str, str]) -> None:
    wrong = []
    with api.client() as http:
        for method, path, _ in operations(api):
            least = ROUTES[(method, path)]
            if least == "public":
                continue
            for role, token in role_tokens.items():
                expected = allowed("user" if role == "user-of-one-actor" else role, least, (method, path))
                answer = call(http, method, path, token)
                if expected and answer.status_code in (401, 403):
                    wrong.append(f"{role} refused {method} {path}: {answer.status_code} {answer.text}")
                if not expected:
                    if answer.status_code != 403:
                        wrong.append(f"{role} not refused {method} {path}: {answer.status_code} {answer.text}")
                    else:
                        assert_error_body(answer, "PermissionDenied")
    assert wrong == []


def test_a_node_certificate_speaks_for_its_node_only(api: ApiProcess) -> None:
    n1 = node_token("n1")
    registration = {"address": "127.0.0.1:1", "workers": []}
    with api.client(n1) as http:
        for method, path, _ in operations(api):
            least = ROUTES[(method, path)]
            answer = call(http, method, path, n1)
            if least == "authenticated" or path.startswith("/v1/nodes/{node}"):  # n1 is the path's node
                assert answer.status_code not in (401, 403), (method, path, answer.text)
            elif least != "public":
                assert answer.status_code == 403, (method, path, answer.text)
        assert http.put("/v1/nodes/n1", json=registration).status_code not in (401, 403)
        other = http.put("/v1/nodes/n2", json=registration)
        assert other.status_code == 403
        assert other.json()["message"] == "only node n2's own certificate may register or report node n2"
    stranger = certificates().directory / "stranger"
    forged = ensure_local_certificates(stranger, ["n1"]).node("n1")
    with api.client(NodeCredentials("n1", forged.cert, forged.key).token()) as http:
        assert http.put("/v1/nodes/n1", json=registration).status_code == 401


def test_refusals_name_what_is_missing(api: ApiProcess, role_tokens: dict[str, str]) -> None:
    with api.client(role_tokens["viewer"]) as http:
        answer = http.post("/v1/atespaces/walk/actors/c1/suspend", json={})
        assert assert_error_body(answer, "PermissionDenied") == "token lacks operator on atespace walk"
        answer = http.post("/v1/atespaces/other/actors/c1/suspend", json={})
        assert assert_error_body(answer, "PermissionDenied") == "token lacks operator on atespace other"
        answer = http.get("/v1/workers")
        assert assert_error_body(answer, "PermissionDenied") == "token lacks cluster-viewer"
        answer = http.put("/v1/nodes/n1", json={})
        assert (
            assert_error_body(answer, "PermissionDenied")
            == "only node n1's own certificate may register or report node n1"
        )
    with api.client(role_tokens["operator"]) as http:
        answer = http.delete("/v1/atespaces/walk/templates/t1")
        assert assert_error_body(answer, "PermissionDenied") == "token lacks admin on atespace walk"
    with api.client(role_tokens["user"]) as http:
        answer = http.get("/v1/actors")
        assert assert_error_body(answer, "PermissionDenied") == "token lacks viewer on any atespace"


def test_lists_show_only_the_atespaces_a_token_may_read(api: ApiProcess) -> None:
    with api.client() as http:
        for name in ("seen", "hidden"):
            assert http.post("/v1/atespaces", json={"name": name}, headers=api.bootstrap).status_code == 201
            answer = http.post(
                f"/v1/atespaces/{name}/actors", json={"name": "a1", "template": "none"}, headers=api.bootstrap
            )
            assert answer.status_code in (201, 400, 404), answer.text
    viewer = create_token(api, "seen-viewer", ["viewer:seen"])["token"]
    with api.client(viewer) as http:
        assert [a["name"] for a in http.get("/v1/atespaces").json()["items"]] == ["seen"]
        assert http.get("/v1/atespaces/hidden").status_code == 403
        assert http.get("/v1/actors", params={"atespace": "hidden"}).status_code == 403
        shown = {a["atespace"] for a in http.get("/v1/actors").json()["items"]}
        assert shown <= {"seen"}


def test_a_token_is_shown_once_and_stored_only_as_a_hash(api: ApiProcess) -> None:
    created = create_token(api, "hashed", ["cluster-viewer"], expires_in_seconds=3600)
    token_id, secret = created["token_id"], created["token"].split("_", 2)[2]
    assert created["token"] == f"ate_{token_id}_{secret}"
    with api.client() as http:
        listed = http.get("/v1/tokens", headers=api.bootstrap)
    assert listed.status_code == 200
    assert secret not in listed.text
    mine = [t for t in listed.json()["items"] if t["token_id"] == token_id]
    assert mine and "token" not in mine[0] and mine[0]["grants"] == ["cluster-viewer"]

    async def row() -> asyncpg.Record:
        connection = await asyncpg.connect(api.database_url)
        try:
            return await connection.fetchrow("SELECT * FROM tokens WHERE id = $1", token_id)
        finally:
            await connection.close()

    stored = asyncio.run(row())
    assert stored["secret_hash"] == hashlib.sha256(secret.encode()).hexdigest()
    assert all(secret not in str(value) for value in stored.values())


def test_a_revoked_or_expired_token_is_refused_at_once(api: ApiProcess) -> None:
    revoked = create_token(api, "to-revoke", ["cluster-viewer"])
    expired = create_token(api, "to-expire", ["cluster-viewer"], expires_in_seconds=60)
    for token in (revoked, expired):
        with api.client(token["token"]) as http:
            assert http.get("/v1/workers").status_code == 200
    with api.client() as http:
        assert http.delete(f"/v1/tokens/{revoked['token_id']}", headers=api.bootstrap).status_code == 204

    async def expire() -> None:
        connection = await asyncpg.connect(api.database_url)
        try:
            await connection.execute(
                "UPDATE tokens SET expires_at = now() - interval '1 second' WHERE id = $1", expired["token_id"]
            )
        finally:
            await connection.close()

    asyncio.run(expire())
    for token in (revoked, expired):
        with api.client(token["token"]) as http:
            answer = http.get("/v1/workers")
        assert answer.status_code == 401
        assert (
            assert_error_body(answer, "Unauthenticated")
            == "the bearer token is not valid (unknown, expired or revoked)"
        )


def test_a_tampered_secret_is_refused(api: ApiProcess) -> None:
    token = create_token(api, "tampered", ["cluster-viewer"])["token"]
    tampered = token[:-1] + ("A" if token[-1] != "A" else "B")
    with api.client(tampered) as http:
        assert http.get("/v1/workers").status_code == 401


def test_an_atespace_admin_grants_only_within_its_atespace(api: ApiProcess) -> None:
    with api.client() as http:
        for name in ("team-a", "team-b"):
            assert http.post("/v1/atespaces", json={"name": name}, headers=api.bootstrap).status_code == 201
    admin = create_token(api, "team-a-admin", ["admin:team-a"])["token"]
    other = create_token(api, "team-b-viewer", ["viewer:team-b"])
    with api.client(admin) as http:
        made = http.post("/v1/tokens", json={"name": "ci", "grants": ["operator:team-a"]})
        assert made.status_code == 201, made.text
        refused = http.post("/v1/tokens", json={"name": "x", "grants": ["operator:team-b"]})
        assert refused.status_code == 403
        assert refused.json()["message"] == "grants[0] (operator:team-b): token lacks admin on atespace team-b"
        refused = http.post("/v1/tokens", json={"name": "x", "grants": ["cluster-viewer"]})
        assert refused.json()["message"] == "grants[0] (cluster-viewer): token lacks cluster-admin"
        listed = {t["token_id"] for t in http.get("/v1/tokens").json()["items"]}
        assert made.json()["token_id"] in listed and other["token_id"] not in listed
        gone = http.delete(f"/v1/tokens/{other['token_id']}")
        assert gone.status_code == 404
    with api.client(other["token"]) as http:
        assert http.get("/v1/atespaces/team-b").status_code == 200


@pytest.mark.parametrize(
    ("grants", "field_message"),
    [
        (["owner:demo"], "unknown role 'owner'"),
        (["cluster-admin:demo"], "cluster-admin is a cluster role: it takes no atespace"),
        (["viewer"], "viewer is granted on an atespace: viewer:<atespace>"),
        (["node:n1"], "node grants come from node certificates, never from tokens"),
        (["viewer:Demo"], "is not a valid name"),
        (["viewer:demo\n"], "is not a valid name"),
        ([], "at least 1 item"),
    ],
)
def test_bad_grants_are_refused_and_create_nothing(api: ApiProcess, grants: list[str], field_message: str) -> None:
    with api.client() as http:
        before = len(http.get("/v1/tokens", headers=api.bootstrap).json()["items"])
        answer = http.post("/v1/tokens", json={"name": "bad", "grants": grants}, headers=api.bootstrap)
        assert answer.status_code == 400, answer.text
        message = assert_error_body(answer, "InvalidArgument")
        assert message.startswith("invalid request: grants") and field_message in message
        assert len(http.get("/v1/tokens", headers=api.bootstrap).json()["items"]) == before


def test_a_grant_on_a_missing_atespace_is_refused(api: ApiProcess) -> None:
    with api.client() as http:
        answer = http.post("/v1/tokens", json={"name": "typo", "grants": ["viewer:nowhere"]}, headers=api.bootstrap)
    assert answer.status_code == 400
    assert answer.json()["message"] == "grants[0]: atespace nowhere does not exist"


def test_access_review_says_who_may_reach_an_actor(api: ApiProcess, role_tokens: dict[str, str]) -> None:
    with api.client(role_tokens["router"]) as http:

        def review(token: str, atespace: str, actor: str) -> dict[str, Any]:
            answer = http.post("/v1/accessreviews", json={"token": token, "atespace": atespace, "actor": actor})
            assert answer.status_code == 200, answer.text
            body: dict[str, Any] = answer.json()
            return body

        assert review(role_tokens["user-of-one-actor"], "walk", "c1")["allowed"] is True
        assert review(role_tokens["user-of-one-actor"], "walk", "c2")["allowed"] is False
        assert review(role_tokens["user"], "walk", "c2")["allowed"] is True
        assert review(role_tokens["operator"], "walk", "c2")["allowed"] is True
        assert review(role_tokens["viewer"], "walk", "c1")["allowed"] is False
        assert review(role_tokens["user"], "other", "c1")["allowed"] is False
        assert review("ate_0123456789ab_nope", "walk", "c1") == {
            "authenticated": False,
            "allowed": False,
            "principal": None,
        }


def test_whoami(api: ApiProcess, role_tokens: dict[str, str]) -> None:
    with api.client(role_tokens["operator"]) as http:
        me = http.get("/v1/whoami").json()
    assert me["grants"] == ["operator:walk"] and me["name"].endswith("(walk-operator)")
