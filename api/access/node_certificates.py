"""A node's proof of identity: a short-lived JWT signed with the key of its TLS certificate.

The API server cannot see TLS client certificates (it may sit behind a proxy that ends TLS),
so an atelet proves which node it is with a JWT (`atelet/node_identity.py` makes them): the
header's `x5c` holds the node's certificate chain (base64 DER, leaf first), the claims are
`sub` (the node name), `aud` (`ate-api`), `iat` and `exp`, and the leaf's key signed it.

`NodeCertificateVerifier.verify` accepts a token only when all of these hold, and then answers
the node name (else None, with no detail: the caller gets one refusal whatever failed):
- the leaf chains to one of the node CAs (`cryptography`'s X.509 path validation: signatures,
  validity windows now, basic constraints), its SAN names `sub` as a DNS name, its extended key
  usage allows server auth (a node's certificate is its atelet's gRPC server certificate; the
  control plane's client-only certificate does not pass), and its CN is `sub`;
- the JWT's algorithm is one the leaf's key type signs with (never `none`, never an HMAC keyed
  with the public key) and its signature verifies with that key;
- `aud` is the audience, `exp` is in the future, `iat` is not, and the token lives at most
  MAX_LIFETIME_SECONDS (`LEEWAY_SECONDS` of clock skew allowed on each).

That the node name in the route is the one proved is the route guard's business.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import time
from typing import Any

import jwt
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes
from cryptography.x509 import DNSName
from cryptography.x509.oid import NameOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

AUDIENCE = "ate-api"
MAX_LIFETIME_SECONDS = 300
"""The longest `exp - iat` accepted: a stolen token is good for minutes at most."""
LEEWAY_SECONDS = 30
MAX_CHAIN = 4
"""At most this many certificates in `x5c` (the leaf and its intermediates)."""

_EC_ALGORITHMS = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
_RSA_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"]


def _algorithms_for(key: CertificatePublicKeyTypes) -> list[str]:
    """The JWS algorithms a key of this type signs with (empty: none accepted)."""
    if isinstance(key, ec.EllipticCurvePublicKey):
        return [_EC_ALGORITHMS[key.curve.name]] if key.curve.name in _EC_ALGORITHMS else []
    if isinstance(key, rsa.RSAPublicKey):
        return _RSA_ALGORITHMS
    if isinstance(key, ed25519.Ed25519PublicKey):
        return ["EdDSA"]
    return []


def _chain(header: dict[str, Any]) -> list[x509.Certificate]:
    """The certificates of the header's `x5c`, leaf first.

    Raises:
        ValueError: missing, empty, too long, or not base64 DER certificates.
    """
    x5c = header.get("x5c")
    if not isinstance(x5c, list) or not 1 <= len(x5c) <= MAX_CHAIN or not all(isinstance(c, str) for c in x5c):
        raise ValueError("x5c")
    return [x509.load_der_x509_certificate(base64.b64decode(c, validate=True)) for c in x5c]


class NodeCertificateVerifier:
    """Checks node-signed JWTs against the node CA(s).

    Args:
        ca_pem: PEM of the CA certificate(s) that issue node certificates (more than one while
            a CA is being replaced).
        audience: the `aud` a token must carry.

    Raises:
        ValueError: `ca_pem` holds no PEM certificate.
    """

    def __init__(self, ca_pem: bytes, audience: str = AUDIENCE) -> None:
        self._store = Store(x509.load_pem_x509_certificates(ca_pem))
        self.audience = audience

    def verify(self, token: str) -> str | None:
        """The node name `token` proves, or None when it proves nothing (whatever the reason)."""
        try:
            return self._verify(token)
        except (jwt.PyJWTError, VerificationError, UnsupportedAlgorithm, ValueError, TypeError, binascii.Error):
            return None

    def _verify(self, token: str) -> str | None:
        chain = _chain(jwt.get_unverified_header(token))
        leaf = chain[0]
        algorithms = _algorithms_for(leaf.public_key())
        if not algorithms:
            return None
        now = time.time()
        claims = jwt.decode(
            token,
            leaf.public_key(),  # type: ignore[arg-type]  # one of the types _algorithms_for accepts
            algorithms=algorithms,
            audience=self.audience,
            leeway=LEEWAY_SECONDS,
            options={"require": ["sub", "aud", "iat", "exp"], "verify_iat": True},
        )
        subject, issued, expires = claims["sub"], claims["iat"], claims["exp"]
        if not isinstance(subject, str) or not subject:
            return None
        if not isinstance(issued, int | float) or not isinstance(expires, int | float):
            return None
        if expires - issued > MAX_LIFETIME_SECONDS or issued > now + LEEWAY_SECONDS or expires <= now - LEEWAY_SECONDS:
            return None
        moment = datetime.datetime.fromtimestamp(now, datetime.UTC)
        verifier = (
            PolicyBuilder()
            .store(self._store)
            .time(moment)
            .max_chain_depth(MAX_CHAIN)
            .build_server_verifier(DNSName(subject))
        )
        verifier.verify(leaf, chain[1:])
        names = [a.value for a in leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
        return subject if names == [subject] else None
