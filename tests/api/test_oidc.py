"""Bearer JWTs from an external OIDC issuer: verified against the issuer's published keys (found
through its discovery document), with `iss`, `aud` and `exp` checked and groups mapped to grants.

The issuer is a real HTTP server of this test serving `/.well-known/openid-configuration` and a
JWKS, with RSA and EC keys made here; the tokens are signed with PyJWT as an issuer would.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from tests.api.conftest import ApiProcess, api_process, free_port

AUDIENCE = "ate-tests"


class Issuer:
    """A running OIDC issuer: its URL, its signing keys, and how often its JWKS was fetched."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())
        self.jwks_fetches = 0
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    body: dict[str, Any] = {"issuer": issuer.url, "jwks_uri": f"{issuer.url}/keys"}
                elif self.path == "/keys":
                    issuer.jwks_fetches += 1
                    body = {"keys": [issuer.jwk(issuer.rsa, "rsa-1", "RS256"), issuer.jwk(issuer.ec, "ec-1", "ES256")]}
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def jwk(key: Any, kid: str, alg: str) -> dict[str, Any]:
        algorithm = jwt.algorithms.RSAAlgorithm if alg.startswith("RS") else jwt.algorithms.ECAlgorithm
        document: dict[str, Any] = json.loads(algorithm.to_jwk(key.public_key()))
        return {**document, "kid": kid, "alg": alg, "use": "sig"}

    def token(self, sub: str = "alice", groups: list[str] | None = None, kid: str = "rsa-1", **claims: Any) -> str:
        now = int(time.time())
        payload = {"iss": self.url, "aud": AUDIENCE, "sub": sub, "iat": now, "exp": now + 300, "groups": groups or []}
        payload.update(claims)
        key, alg = (self.rsa, "RS256") if kid == "rsa-1" else (self.ec, "ES256")
        return jwt.encode({k: v for k, v in payload.items() if v is not None}, key, algorithm=alg, headers={"kid": kid})


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    running = Issuer()
    yield running
    running.server.shutdown()


@pytest.fixture(scope="module")
def oidc_api(
    tmp_path_factory: pytest.TempPathFactory, api_database_url: str, temporal_address: str, issuer: Issuer
) -> Iterator[ApiProcess]:
    grants = {"platform": ["cluster-admin"], "demo-devs": ["operator:demo"], "readers": ["viewer:demo"]}
    with api_process(
        tmp_path_factory.mktemp("oidc"),
        api_database_url,
        temporal_address,
        ATE_OIDC_ISSUER=issuer.url,
        ATE_OIDC_AUDIENCE=AUDIENCE,
        ATE_OIDC_GROUP_GRANTS=json.dumps(grants),
    ) as running:
        with running.client() as http:
            assert http.post("/v1/atespaces", json={"name": "demo"}, headers=running.bootstrap).status_code == 201
        yield running


def status(api: ApiProcess, token: str, method: str = "GET", path: str = "/v1/atespaces/demo/actors") -> int:
    with api.client(token) as http:
        return http.request(method, path, json={} if method == "POST" else None).status_code


def test_groups_become_grants(oidc_api: ApiProcess, issuer: Issuer) -> None:
    with oidc_api.client(issuer.token("alice", ["demo-devs", "unmapped"])) as http:
        me = http.get("/v1/whoami").json()
    assert me == {"name": "oidc:alice", "grants": ["operator:demo"]}
    assert status(oidc_api, issuer.token("bob", ["readers"])) == 200
    assert status(oidc_api, issuer.token("bob", ["readers"]), "POST", "/v1/atespaces/demo/actors/c1/suspend") == 403
    assert status(oidc_api, issuer.token("root", ["platform"]), "GET", "/v1/workers") == 200


def test_an_ec_key_of_the_issuer_works_too(oidc_api: ApiProcess, issuer: Issuer) -> None:
    assert status(oidc_api, issuer.token("carol", ["readers"], kid="ec-1")) == 200


def test_a_token_without_a_mapped_group_is_authenticated_but_refused(oidc_api: ApiProcess, issuer: Issuer) -> None:
    token = issuer.token("dave", ["nobody-maps-this"])
    with oidc_api.client(token) as http:
        assert http.get("/v1/whoami").json() == {"name": "oidc:dave", "grants": []}
        answer = http.get("/v1/atespaces/demo/actors")
    assert answer.status_code == 403
    assert answer.json()["message"] == "token lacks viewer on atespace demo"


@pytest.mark.parametrize(
    "claims",
    [
        {"aud": "someone-else"},
        {"iss": "https://not-the-issuer.example"},
        {"exp": int(time.time()) - 120},
        {"exp": None},
        {"aud": None},
        {"nbf": int(time.time()) + 3600},
    ],
    ids=["wrong-audience", "wrong-issuer", "expired", "no-expiry", "no-audience", "not-yet-valid"],
)
def test_bad_claims_are_401_with_no_detail(oidc_api: ApiProcess, issuer: Issuer, claims: dict[str, Any]) -> None:
    token = issuer.token("eve", ["platform"], **claims)
    with oidc_api.client(token) as http:
        answer = http.get("/v1/workers")
    assert answer.status_code == 401
    assert answer.json()["message"] == "the bearer token is not valid (unknown, expired or revoked)"


def test_forged_tokens_are_401(oidc_api: ApiProcess, issuer: Issuer) -> None:
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = int(time.time())
    claims = {"iss": issuer.url, "aud": AUDIENCE, "sub": "mallory", "exp": now + 300, "groups": ["platform"]}
    forged = [
        jwt.encode(claims, stranger, algorithm="RS256", headers={"kid": "rsa-1"}),  # someone else's key
        jwt.encode(claims, stranger, algorithm="RS256", headers={"kid": "unknown"}),  # a key the issuer lacks
        jwt.encode(claims, "", algorithm="none"),  # unsigned
    ]
    public_pem = issuer.rsa.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    header = {"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}  # HMAC "signed" with the public key
    forged.append(_hs256_with(header, claims, public_pem))
    genuine = issuer.token("mallory", ["platform"])
    head, _claims, signature = genuine.split(".")
    tampered_body = jwt.utils.base64url_encode(json.dumps({**claims, "sub": "root"}).encode()).decode()
    forged.append(f"{head}.{tampered_body}.{signature}")
    for token in forged:
        with oidc_api.client(token) as http:
            assert http.get("/v1/workers").status_code == 401, token


def _hs256_with(header: dict[str, Any], claims: dict[str, Any], secret: bytes) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    signing_input = f"{part(header)}.{part(claims)}"
    signature = base64.urlsafe_b64encode(hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()).rstrip(b"=")
    return f"{signing_input}.{signature.decode()}"


def test_the_issuers_keys_are_cached(oidc_api: ApiProcess, issuer: Issuer) -> None:
    before = issuer.jwks_fetches
    for _ in range(5):
        assert status(oidc_api, issuer.token("frank", ["readers"])) == 200
    assert issuer.jwks_fetches - before <= 1


def test_an_unreachable_issuer_is_503_not_401(
    tmp_path: Path, api_database_url: str, temporal_address: str, issuer: Issuer
) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    with api_process(
        tmp_path, api_database_url, temporal_address, ATE_OIDC_ISSUER=nowhere, ATE_OIDC_AUDIENCE=AUDIENCE
    ) as api:
        with api.client(issuer.token("grace", ["readers"])) as http:
            answer = http.get("/v1/atespaces/demo/actors")
    assert answer.status_code == 503
    assert answer.json()["message"] == f"cannot check OIDC tokens now: the issuer {nowhere} did not answer"


def test_a_bad_group_mapping_stops_the_api_server_with_the_field_named(
    tmp_path: Path, api_database_url: str, temporal_address: str
) -> None:
    with pytest.raises(RuntimeError) as failed, contextlib.ExitStack() as stack:
        stack.enter_context(
            api_process(
                tmp_path,
                api_database_url,
                temporal_address,
                ATE_OIDC_ISSUER="http://127.0.0.1:1",
                ATE_OIDC_GROUP_GRANTS=json.dumps({"ops": ["owner:demo"]}),
            )
        )
    assert "oidc_group_grants['ops']: unknown role 'owner'" in str(failed.value)
