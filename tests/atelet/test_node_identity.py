"""The node's bearer tokens (atelet/node_identity.py): signed with its certificate's key, proved by
the API's verifier, renewed before they expire and when the certificate is renewed. That every
request to the API carries one is test_registration's, test_exit_events' and test_drain's (their
stand-in API refuses requests without a token proving the node)."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from api.access.node_certificates import NodeCertificateVerifier
from ate.dev.certificates import CertificateAuthority
from atelet.node_identity import NodeCredentials
from tests.atelet.conftest import certificates

NOW = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def test_a_token_names_the_node_carries_its_certificate_and_lives_five_minutes() -> None:
    files = certificates("n-identity").node("n-identity")
    token = NodeCredentials("n-identity", files.cert, files.key).token()
    header = jwt.get_unverified_header(token)
    claims = jwt.decode(token, options={"verify_signature": False})
    der = x509.load_pem_x509_certificate(files.cert.read_bytes()).public_bytes(serialization.Encoding.DER)
    assert [base64.b64decode(c) for c in header["x5c"]] == [der]
    assert header["alg"] == "ES256"
    assert (claims["sub"], claims["aud"], claims["exp"] - claims["iat"]) == ("n-identity", "ate-api", 300)
    assert NodeCertificateVerifier(files.ca.read_bytes()).verify(token) == "n-identity"


def test_a_token_is_reused_until_a_minute_before_it_expires() -> None:
    files = certificates("n-renew").node("n-renew")
    clock = Clock()
    credentials = NodeCredentials("n-renew", files.cert, files.key, clock=clock)
    first = credentials.token()
    clock.now = NOW + 239  # 61 s left
    assert credentials.token() == first
    clock.now = NOW + 241  # 59 s left
    second = credentials.token()
    assert second != first
    assert jwt.decode(second, options={"verify_signature": False})["iat"] == int(NOW + 241)


def test_a_renewed_certificate_is_used_at_once(tmp_path: Path) -> None:
    ca = CertificateAuthority.load(certificates().ca.read_bytes(), (certificates().directory / "ca.key").read_bytes())
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    old, new = ca.issue_node("n-rotate"), ca.issue_node("n-rotate")
    cert.write_bytes(old.cert_pem)
    key.write_bytes(old.key_pem)
    credentials = NodeCredentials("n-rotate", cert, key)
    before = credentials.token()
    (tmp_path / "n.crt").write_bytes(new.cert_pem)
    (tmp_path / "n.key").write_bytes(new.key_pem)
    (tmp_path / "n.key").replace(key)
    (tmp_path / "n.crt").replace(cert)
    after = credentials.token()
    der = new.certificate.public_bytes(serialization.Encoding.DER)
    assert base64.b64decode(jwt.get_unverified_header(after)["x5c"][0]) == der
    assert before != after
    assert NodeCertificateVerifier(ca.cert_pem).verify(after) == "n-rotate"


def test_a_request_without_usable_files_fails_as_a_request_once_the_last_token_expired(tmp_path: Path) -> None:
    files = certificates("n-gone").node("n-gone")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(files.cert.read_bytes())
    key.write_bytes(files.key.read_bytes())
    clock = Clock()
    credentials = NodeCredentials("n-gone", cert, key, clock=clock)
    request = httpx.Request("PUT", "http://api/v1/nodes/n-gone")
    first = next(credentials.auth_flow(request)).headers["Authorization"]
    cert.unlink()
    clock.now = NOW + 250  # under a minute left: it would renew, cannot, and keeps the last one
    assert next(credentials.auth_flow(request)).headers["Authorization"] == first
    clock.now = NOW + 299
    with pytest.raises(httpx.RequestError) as caught:
        next(credentials.auth_flow(request))
    assert str(caught.value).startswith("cannot sign the node's token: [Errno 2] No such file or directory")
