"""JWTs from an external OIDC issuer, verified against the issuer's published signing keys (JWKS)
with PyJWT; the groups claim maps to grants through `oidc_group_grants`."""

from __future__ import annotations

import asyncio
import logging

import httpx
import jwt

from api.errors import ApiError
from domain.access import Grant, Principal
from domain.reasons import Reason

log = logging.getLogger("ate.api.access")

ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
"""Asymmetric algorithms only: an HMAC token "signed" with the issuer's public key is refused."""

LEEWAY_SECONDS = 30
"""Clock skew tolerated on `exp`, `nbf` and `iat`."""


class IssuerUnavailable(ApiError):
    """The issuer's keys could not be fetched: OIDC tokens cannot be checked right now (503)."""

    reason = Reason.UNAVAILABLE


class OidcVerifier:
    """Verifies an issuer's JWTs: signature by a key from its JWKS, `iss`, `aud`, `exp` (required).

    Args:
        issuer: The expected `iss`, e.g. https://accounts.example.com.
        audience: The expected `aud`.
        jwks_url: The JWKS document; None to read `jwks_uri` from the issuer's
            /.well-known/openid-configuration (once, at the first token).
        username_claim: The claim naming the principal.
        groups_claim: The claim listing the principal's groups.
        group_grants: Grant texts per group (`Grant.parse`), already validated by the settings.
    """

    def __init__(
        self,
        issuer: str,
        audience: str,
        jwks_url: str | None,
        username_claim: str,
        groups_claim: str,
        group_grants: dict[str, list[str]],
    ) -> None:
        self.issuer = issuer
        self.audience = audience
        self.username_claim = username_claim
        self.groups_claim = groups_claim
        self.group_grants = {group: tuple(Grant.parse(g) for g in grants) for group, grants in group_grants.items()}
        self._jwks_url = jwks_url
        self._keys: jwt.PyJWKClient | None = None
        self._lock = asyncio.Lock()

    async def _key_client(self) -> jwt.PyJWKClient:
        async with self._lock:
            if self._keys is None:
                url = self._jwks_url or await self._discover()
                self._keys = jwt.PyJWKClient(url, cache_keys=True, lifespan=300, timeout=10)
            return self._keys

    async def _discover(self) -> str:
        where = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        try:
            async with httpx.AsyncClient(timeout=10) as client:
                response = await client.get(where)
                response.raise_for_status()
                url = response.json()["jwks_uri"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as error:
            log.warning("OIDC discovery at %s failed: %s", where, error)
            raise IssuerUnavailable(f"cannot check OIDC tokens now: the issuer {self.issuer} did not answer") from None
        if not isinstance(url, str):
            raise IssuerUnavailable(f"cannot check OIDC tokens now: the issuer {self.issuer} names no jwks_uri")
        return url

    async def principal(self, token: str) -> Principal | None:
        """The principal a valid token names, with the grants of its groups; None when the token
        is not valid (bad signature, wrong issuer or audience, expired, unknown key).

        Raises:
            IssuerUnavailable: the issuer's keys could not be fetched.
        """
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return None
        if header.get("alg") not in ALGORITHMS:
            return None
        keys = await self._key_client()
        try:
            signing_key = await asyncio.to_thread(keys.get_signing_key_from_jwt, token)
        except jwt.PyJWKClientConnectionError as error:
            log.warning("fetching the JWKS of %s failed: %s", self.issuer, error)
            raise IssuerUnavailable(
                f"cannot check OIDC tokens now: the keys of {self.issuer} are unreachable"
            ) from None
        except jwt.PyJWTError:
            return None
        try:
            claims = jwt.decode(
                token,
                signing_key.key,
                algorithms=ALGORITHMS,
                audience=self.audience,
                issuer=self.issuer,
                leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWTError:
            return None
        name = claims.get(self.username_claim)
        if not isinstance(name, str) or not name:
            return None
        groups = claims.get(self.groups_claim) or []
        if isinstance(groups, str):
            groups = [groups]
        grants = [g for group in groups if isinstance(group, str) for g in self.group_grants.get(group, ())]
        return Principal(name=f"oidc:{name}", grants=tuple(dict.fromkeys(grants)))
