"""The node's proof of identity towards the API server: short-lived JWTs signed with its TLS key.

The API server cannot see TLS client certificates (it may sit behind a proxy), so each of the
atelet's requests to it (registration and heartbeats, events, drain) carries
`Authorization: Bearer <jwt>`: a JWT signed with the node's private key (`tls_key`) whose header
`x5c` holds the node's certificate chain (`tls_cert`, base64 DER, leaf first), with claims
`sub` = the node name, `aud` = `ate-api`, `iat` and `exp` (`LIFETIME_SECONDS` later). The API
accepts it when the certificate chains to its node CA, names the node (CN and SAN DNS) and its
key signed the token (`api/access/node_certificates.py`).

A token is re-minted once less than `RENEW_SECONDS` of it is left, and whenever the certificate
or key file changed (renewed in place).
"""

from __future__ import annotations

import base64
import os
import threading
import time
from collections.abc import Callable, Generator
from pathlib import Path

import httpx
import jwt
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from atelet.tls import TlsConfigError, check_pair

AUDIENCE = "ate-api"
LIFETIME_SECONDS = 300
"""How long one token is valid (the API refuses longer ones)."""
RENEW_SECONDS = 60

_CURVES = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}


def algorithm_of(key: PrivateKeyTypes) -> str:
    """The JWS algorithm of a private key: ES256/384/512 by curve, RS256 for RSA, EdDSA for Ed25519.

    Raises:
        TlsConfigError: another kind of key.
    """
    if isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name in _CURVES:
        return _CURVES[key.curve.name]
    if isinstance(key, rsa.RSAPrivateKey):
        return "RS256"
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return "EdDSA"
    raise TlsConfigError(
        f"a node key of type {type(key).__name__} cannot sign registrations (use EC P-256, RSA or Ed25519)"
    )


class NodeCredentials(httpx.Auth):
    """Adds the node's bearer token to each request (an `httpx.Auth`); thread-safe.

    Args:
        node: the node name (the token's `sub`; the certificate must name it).
        cert: PEM file of the node's certificate chain, leaf first.
        key: PEM file of its private key.
        clock: seconds since the epoch (tests move it).

    Raises:
        TlsConfigError: (at the first token) the files are unusable.
    """

    def __init__(self, node: str, cert: Path, key: Path, clock: Callable[[], float] = time.time) -> None:
        self.node = node
        self.cert = cert
        self.key = key
        self.clock = clock
        self._lock = threading.Lock()
        self._token = ""
        self._expires = 0.0
        self._stamp: tuple[int, ...] = ()

    def _files_stamp(self) -> tuple[int, ...]:
        a, b = os.stat(self.cert), os.stat(self.key)
        return (a.st_ino, a.st_mtime_ns, a.st_size, b.st_ino, b.st_mtime_ns, b.st_size)

    def token(self) -> str:
        """A token valid for at least RENEW_SECONDS more (minted when needed)."""
        with self._lock:
            now = self.clock()
            stamp = self._files_stamp()
            if self._token and now < self._expires - RENEW_SECONDS and stamp == self._stamp:
                return self._token
            chain_pem, key_pem = self.cert.read_bytes(), self.key.read_bytes()
            check_pair(chain_pem, key_pem, str(self.cert), str(self.key))
            chain = x509.load_pem_x509_certificates(chain_pem)
            key = serialization.load_pem_private_key(key_pem, password=None)
            issued = int(now)
            x5c = [base64.b64encode(c.public_bytes(serialization.Encoding.DER)).decode() for c in chain]
            self._token = jwt.encode(
                {"sub": self.node, "aud": AUDIENCE, "iat": issued, "exp": issued + LIFETIME_SECONDS},
                key,  # type: ignore[arg-type]  # any signing key algorithm_of accepts
                algorithm=algorithm_of(key),
                headers={"x5c": x5c},
            )
            self._expires, self._stamp = issued + LIFETIME_SECONDS, stamp
            return self._token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        """Sets `Authorization: Bearer <token>` on the request.

        Raises:
            httpx.RequestError: no token can be minted now (the files are gone or unusable and the
                last token expired): the callers' retry loops treat it as a failed request.
        """
        try:
            token = self.token()
        except (OSError, ValueError) as error:  # TlsConfigError is a ValueError
            with self._lock:
                if self._token and self.clock() < self._expires - 5:
                    token = self._token
                else:
                    raise httpx.RequestError(f"cannot sign the node's token: {error}", request=request) from None
        request.headers["Authorization"] = f"Bearer {token}"
        yield request
