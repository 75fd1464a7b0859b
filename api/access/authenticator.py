"""From a bearer credential to a `Principal`: an ate token (`ate_<id>_<secret>`, checked against
its stored hash), the bootstrap token, a node's certificate-signed assertion, or an OIDC JWT."""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Protocol

import jwt

from api.access.oidc import OidcVerifier
from api.settings import ApiSettings
from domain.access import TOKEN_PREFIX, Grant, Principal, Role, hash_secret
from store.interfaces import ApiStore

BOOTSTRAP_MINIMUM_LENGTH = 32
"""Characters a bootstrap token must have at least (it is a cluster-admin credential)."""


class NodeAssertionVerifier(Protocol):
    """Checks a node's certificate-signed assertion (api/access/node_certificates.py)."""

    def verify(self, token: str) -> str | None:
        """The node name the assertion proves, or None."""
        ...


def read_bootstrap_token(settings: ApiSettings) -> str | None:
    """The bootstrap token from `bootstrap_token` or `bootstrap_token_file`.

    Raises:
        ValueError: the token is shorter than BOOTSTRAP_MINIMUM_LENGTH, or the file is unreadable.
    """
    token = settings.bootstrap_token
    if settings.bootstrap_token_file is not None:
        try:
            token = Path(settings.bootstrap_token_file).read_text().strip()
        except OSError as error:
            raise ValueError(f"bootstrap_token_file {settings.bootstrap_token_file}: {error.strerror}") from None
    if token is not None and len(token) < BOOTSTRAP_MINIMUM_LENGTH:
        raise ValueError(f"the bootstrap token must have at least {BOOTSTRAP_MINIMUM_LENGTH} characters")
    return token


class Authenticator:
    """Turns a bearer credential into the principal it proves, or None.

    Args:
        store: Where ate tokens live.
        bootstrap_token: The cluster-admin bootstrap token, or None.
        oidc: The OIDC verifier, or None when no issuer is configured.
        nodes: The node-assertion verifier, or None when no node CA is configured.
    """

    def __init__(
        self,
        store: ApiStore,
        bootstrap_token: str | None = None,
        oidc: OidcVerifier | None = None,
        nodes: NodeAssertionVerifier | None = None,
    ) -> None:
        self.store = store
        self._bootstrap_hash = hash_secret(bootstrap_token) if bootstrap_token else None
        self.oidc = oidc
        self.nodes = nodes

    async def authenticate(self, credential: str) -> Principal | None:
        """The principal `credential` proves; None when it proves nothing.

        Raises:
            api.access.oidc.IssuerUnavailable: an OIDC token could not be checked now.
        """
        if credential.startswith(TOKEN_PREFIX):
            record = await self.store.tokens.authenticate(credential)
            if record is None:
                return None
            return Principal(name=f"token {record.token_id} ({record.name})", grants=tuple(record.grants))
        if self._bootstrap_hash is not None and hmac.compare_digest(self._bootstrap_hash, hash_secret(credential)):
            return Principal(name="bootstrap", grants=(Grant(Role.CLUSTER_ADMIN),))
        if credential.count(".") != 2:
            return None
        if self.nodes is not None and _has_certificate_header(credential):
            node = self.nodes.verify(credential)
            return Principal(name=f"node {node}", grants=(Grant(Role.NODE, node=node),)) if node else None
        if self.oidc is not None:
            return await self.oidc.principal(credential)
        return None


def _has_certificate_header(token: str) -> bool:
    try:
        return "x5c" in jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        return False
