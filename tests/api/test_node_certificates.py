"""A node proves its name with a JWT signed by its certificate's key (api/access/node_certificates.py),
checked here with real certificates from a real CA; every forged, stale or misdirected token
proves nothing."""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from api.access.node_certificates import NodeCertificateVerifier
from ate.dev.certificates import CertificateAuthority, IssuedCertificate

CA = CertificateAuthority.create("test node CA")
OTHER_CA = CertificateAuthority.create("test node CA")  # same name, other key
NODE = CA.issue_node("n1")


def x5c(*issued: IssuedCertificate) -> list[str]:
    return [base64.b64encode(i.certificate.public_bytes(serialization.Encoding.DER)).decode() for i in issued]


def token(
    issued: IssuedCertificate = NODE,
    *,
    sub: str = "n1",
    aud: str = "ate-api",
    iat: float | None = None,
    lifetime: int = 300,
    headers: dict[str, Any] | None = None,
) -> str:
    issued_at = int(time.time() if iat is None else iat)
    claims = {"sub": sub, "aud": aud, "iat": issued_at, "exp": issued_at + lifetime}
    key = serialization.load_pem_private_key(issued.key_pem, password=None)
    return jwt.encode(claims, key, algorithm="ES256", headers={"x5c": x5c(issued)} if headers is None else headers)  # type: ignore[arg-type]


def verifier() -> NodeCertificateVerifier:
    return NodeCertificateVerifier(CA.cert_pem)


def test_a_node_token_proves_its_node() -> None:
    assert verifier().verify(token()) == "n1"


def test_a_ca_bundle_with_the_issuer_among_others_is_enough() -> None:
    assert NodeCertificateVerifier(OTHER_CA.cert_pem + CA.cert_pem).verify(token()) == "n1"


def test_a_certificate_of_another_ca_proves_nothing() -> None:
    assert verifier().verify(token(OTHER_CA.issue_node("n1"))) is None


def test_an_expired_certificate_proves_nothing() -> None:
    now = datetime.datetime.now(datetime.UTC)
    expired = CA.issue(
        "n1", server=True, not_before=now - datetime.timedelta(days=2), not_after=now - datetime.timedelta(hours=1)
    )
    assert verifier().verify(token(expired)) is None


def test_a_certificate_not_yet_valid_proves_nothing() -> None:
    now = datetime.datetime.now(datetime.UTC)
    future = CA.issue(
        "n1", server=True, not_before=now + datetime.timedelta(hours=1), not_after=now + datetime.timedelta(days=2)
    )
    assert verifier().verify(token(future)) is None


def test_a_token_for_another_node_than_the_certificate_proves_nothing() -> None:
    assert verifier().verify(token(sub="n2")) is None


def test_a_certificate_whose_cn_is_not_the_subject_proves_nothing() -> None:
    # SAN says n2 (so path validation for n2 passes), CN says n1: the names disagree
    mixed = CA.issue("n1", server=True, dns_names=["n2"])
    assert verifier().verify(token(mixed, sub="n2")) is None
    assert verifier().verify(token(mixed, sub="n1")) is None


def test_a_certificate_without_a_san_proves_nothing() -> None:
    assert verifier().verify(token(CA.issue("n1", server=True, dns_names=[]))) is None


def test_the_control_planes_client_only_certificate_proves_no_node() -> None:
    control_plane = CA.issue_control_plane()
    assert verifier().verify(token(control_plane, sub="ate-control-plane")) is None


def test_tampered_claims_prove_nothing() -> None:
    header, claims, signature = token().split(".")
    forged = jwt.utils.base64url_encode(
        b'{"sub":"n2","aud":"ate-api","iat":%d,"exp":%d}' % (time.time(), time.time() + 200)
    )
    assert verifier().verify(f"{header}.{forged.decode()}.{signature}") is None
    assert verifier().verify(f"{header}.{claims}.{signature[:-4]}AAAA") is None


def test_a_token_signed_by_another_key_than_the_certificates_proves_nothing() -> None:
    other = CA.issue_node("n1")  # same names, same CA, other key
    key = serialization.load_pem_private_key(other.key_pem, password=None)
    claims = {"sub": "n1", "aud": "ate-api", "iat": int(time.time()), "exp": int(time.time()) + 300}
    forged = jwt.encode(claims, key, algorithm="ES256", headers={"x5c": x5c(NODE)})  # type: ignore[arg-type]
    assert verifier().verify(forged) is None


def test_an_expired_token_proves_nothing() -> None:
    assert verifier().verify(token(iat=time.time() - 400)) is None


def test_a_token_issued_in_the_future_proves_nothing() -> None:
    assert verifier().verify(token(iat=time.time() + 120)) is None


def test_a_token_living_longer_than_five_minutes_proves_nothing() -> None:
    assert verifier().verify(token(lifetime=301)) is None


def test_a_token_for_another_audience_proves_nothing() -> None:
    assert verifier().verify(token(aud="someone-else")) is None


@pytest.mark.parametrize("missing", ["sub", "aud", "iat", "exp"])
def test_a_token_missing_a_claim_proves_nothing(missing: str) -> None:
    now = int(time.time())
    claims = {"sub": "n1", "aud": "ate-api", "iat": now, "exp": now + 300}
    del claims[missing]
    key = serialization.load_pem_private_key(NODE.key_pem, password=None)
    assert verifier().verify(jwt.encode(claims, key, algorithm="ES256", headers={"x5c": x5c(NODE)})) is None  # type: ignore[arg-type]


def test_alg_none_proves_nothing() -> None:
    now = int(time.time())
    claims = {"sub": "n1", "aud": "ate-api", "iat": now, "exp": now + 300}
    unsigned = jwt.encode(claims, None, algorithm="none", headers={"x5c": x5c(NODE)})  # type: ignore[arg-type]
    assert unsigned.endswith(".")  # really unsigned
    assert verifier().verify(unsigned) is None
    assert verifier().verify(unsigned + "c2lnbmF0dXJl") is None


def test_an_hmac_keyed_with_the_certificate_proves_nothing() -> None:
    now = int(time.time())
    claims = {"sub": "n1", "aud": "ate-api", "iat": now, "exp": now + 300}
    public = NODE.certificate.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = {"alg": "HS256", "typ": "JWT", "x5c": x5c(NODE)}
    signing_input = ".".join(
        jwt.utils.base64url_encode(json.dumps(part).encode()).decode() for part in (header, claims)
    )
    mac = jwt.utils.base64url_encode(hmac.new(public, signing_input.encode(), hashlib.sha256).digest()).decode()
    assert verifier().verify(f"{signing_input}.{mac}") is None


@pytest.mark.parametrize(
    "headers",
    [{}, {"x5c": []}, {"x5c": "not a list"}, {"x5c": ["!!!"]}, {"x5c": [base64.b64encode(b"not DER").decode()]}],
)
def test_a_token_without_a_usable_certificate_proves_nothing(headers: dict[str, Any]) -> None:
    assert verifier().verify(token(headers=headers)) is None


@pytest.mark.parametrize("garbage", ["", "a.b.c", "ate_123_secret", "x" * 5000, "..."])
def test_garbage_proves_nothing(garbage: str) -> None:
    assert verifier().verify(garbage) is None
