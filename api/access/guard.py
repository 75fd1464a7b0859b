"""The permission each REST route needs, checked before the route runs.

Every route declares one with `**needs(Permission.X)` (or `**AUTHENTICATED` / `**PUBLIC`); the
declaration also lands in the OpenAPI document as `x-ate-permission`, and tests/api/test_access.py
walks the document so a route without one fails the suite. Where a permission applies depends on
the route's path: on its `{node}` for node permissions, on its `{atespace}`, else on the cluster
(cluster-only permissions) or on at least one atespace (list routes, which then show only what the
principal may read).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from api.errors import ApiError
from domain.access import ATESPACE_ROLES, ROLE_PERMISSIONS, Permission, Principal, refusal
from domain.reasons import Reason

PERMISSION_KEY = "x-ate-permission"
"""The OpenAPI extension naming a route's permission (`authenticated`, `public`, or a Permission)."""

ATESPACE_PERMISSIONS = frozenset(p for role in ATESPACE_ROLES for p in ROLE_PERMISSIONS[role])
NODE_PERMISSIONS = frozenset({Permission.NODES_REGISTER, Permission.NODES_DRAIN})


class Unauthenticated(ApiError):
    """No credential, or one that proves nothing (401)."""

    reason = Reason.UNAUTHENTICATED


class PermissionDenied(ApiError):
    """The principal lacks the route's permission (403)."""

    reason = Reason.PERMISSION_DENIED


async def current_principal(request: Request) -> Principal:
    """The principal the request's `Authorization: Bearer <token>` proves.

    Raises:
        Unauthenticated: no bearer token, or one that is unknown, expired or revoked.
    """
    header = request.headers.get("authorization")
    if not header:
        raise Unauthenticated(
            "this API needs a bearer token (Authorization: Bearer <token>): `ate dev` writes one to the ate "
            "config; `ate create token` makes more"
        )
    scheme, _, credential = header.partition(" ")
    credential = credential.strip()
    if scheme.lower() != "bearer" or not credential:
        raise Unauthenticated("the Authorization header must read 'Bearer <token>'")
    principal = await request.app.state.authenticator.authenticate(credential)
    if principal is None:
        raise Unauthenticated("the bearer token is not valid (unknown, expired or revoked)")
    request.state.principal = principal
    return principal  # type: ignore[no-any-return]


PrincipalDep = Annotated[Principal, Depends(current_principal)]


def needs(permission: Permission) -> dict[str, Any]:
    """The route keywords that require `permission`: `@router.get(path, **needs(P.ACTORS_READ))`.

    Raises (when the route is called):
        Unauthenticated: see current_principal.
        PermissionDenied: with what is lacking, e.g. `token lacks operator on atespace demo`.
    """

    async def check(request: Request, principal: PrincipalDep) -> None:
        node = request.path_params.get("node") if permission in NODE_PERMISSIONS else None
        atespace = request.path_params.get("atespace")
        if node is not None:
            allowed = principal.allows(permission, node=node)
        elif atespace is not None:
            allowed = principal.allows(permission, atespace=atespace)
        elif permission not in ATESPACE_PERMISSIONS:
            allowed = principal.allows(permission)
        else:
            allowed = principal.atespaces(permission) != set()
        if not allowed:
            raise PermissionDenied(refusal(permission, atespace, node))

    return {"dependencies": [Depends(check)], "openapi_extra": {PERMISSION_KEY: permission.value}}


AUTHENTICATED: dict[str, Any] = {
    "dependencies": [Depends(current_principal)],
    "openapi_extra": {PERMISSION_KEY: "authenticated"},
}
"""Route keywords for routes any authenticated principal may call (`/v1/whoami`)."""

PUBLIC: dict[str, Any] = {"openapi_extra": {PERMISSION_KEY: "public"}}
"""Route keywords for the few routes anyone may call (`/healthz`)."""


def readable_atespaces(principal: Principal, permission: Permission, atespace: str | None) -> set[str] | None:
    """For list routes: the atespaces to show (None: all). With `atespace` given, just it.

    Raises:
        PermissionDenied: `atespace` is given and the principal lacks `permission` there.
    """
    if atespace is not None:
        if not principal.allows(permission, atespace=atespace):
            raise PermissionDenied(refusal(permission, atespace))
        return {atespace}
    return principal.atespaces(permission)
