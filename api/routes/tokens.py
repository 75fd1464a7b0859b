"""/v1/tokens (create, list, delete), /v1/accessreviews (the router's question: may this token
reach that actor?) and /v1/whoami."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi import APIRouter, Request, Response

from api.access.guard import AUTHENTICATED, PermissionDenied, PrincipalDep, needs
from api.access.schemas import (
    AccessReviewCreate,
    AccessReviewResult,
    TokenCreate,
    TokenCreated,
    TokenPublic,
    WhoAmI,
)
from api.deps import StoreDep
from api.errors import InvalidArgument
from api.names import check_name
from domain.access import Grant, Permission, Principal, Role, refusal
from store import NotFound
from store.tokens import TokenRecord

router = APIRouter(tags=["access"])


def _view(record: TokenRecord) -> TokenPublic:
    return TokenPublic(
        token_id=record.token_id,
        name=record.name,
        grants=[g.text() for g in record.grants],
        created_by=record.created_by,
        created_at=record.created_at,
        expires_at=record.expires_at,
    )


def _covers_all(principal: Principal, grants: list[Grant]) -> bool:
    return all(principal.covers(g) for g in grants)


@router.post("/v1/tokens", status_code=201, **needs(Permission.TOKENS_MANAGE))
async def create_token(body: TokenCreate, store: StoreDep, principal: PrincipalDep) -> TokenCreated:
    """Create a token with `grants`; its secret is in the answer and nowhere else. An atespace
    admin may grant the roles of its atespaces; only a cluster admin may grant cluster roles."""
    check_name("name", body.name)
    grants = [Grant.parse(g) for g in body.grants]
    for index, grant in enumerate(grants):
        if not principal.covers(grant):
            needed = (
                refusal(Permission.TOKENS_MANAGE, grant.atespace)
                if grant.atespace
                else f"token lacks {Role.CLUSTER_ADMIN.value}"
            )
            raise PermissionDenied(f"grants[{index}] ({grant.text()}): {needed}")
        if grant.atespace is not None:
            try:
                await store.atespaces.get(grant.atespace)
            except NotFound:
                raise InvalidArgument(
                    f"grants[{index}]: atespace {grant.atespace} does not exist", {"field": f"grants[{index}]"}
                ) from None
    expires_at = datetime.now(UTC) + timedelta(seconds=body.expires_in_seconds) if body.expires_in_seconds else None
    record, issued = await store.tokens.create(body.name, grants, principal.name, expires_at)
    return TokenCreated(**_view(record).model_dump(), token=issued.text)


@router.get("/v1/tokens", **needs(Permission.TOKENS_MANAGE))
async def list_tokens(store: StoreDep, principal: PrincipalDep) -> dict[str, list[TokenPublic]]:
    """The tokens (not revoked) whose every grant the caller could have given."""
    return {"items": [_view(t) for t in await store.tokens.all() if _covers_all(principal, t.grants)]}


@router.delete("/v1/tokens/{token_id}", status_code=204, **needs(Permission.TOKENS_MANAGE))
async def delete_token(token_id: str, store: StoreDep, principal: PrincipalDep) -> Response:
    """Revoke a token at once. A token the caller could not have given is "not found" to it."""
    record = await store.tokens.get(token_id) if len(token_id) <= 64 else None
    if record is None or not _covers_all(principal, record.grants):
        raise NotFound(f"token {token_id[:64]} not found")
    await store.tokens.revoke(token_id)
    return Response(status_code=204)


@router.post("/v1/accessreviews", **needs(Permission.TOKENS_REVIEW))
async def review_access(body: AccessReviewCreate, request: Request) -> AccessReviewResult:
    """Whether the bearer of `token` may reach actor `atespace`/`actor` (for the router)."""
    principal = await request.app.state.authenticator.authenticate(body.token)
    if principal is None:
        return AccessReviewResult(authenticated=False, allowed=False)
    allowed = principal.allows(Permission.ACTORS_REACH, atespace=body.atespace, actor=body.actor)
    return AccessReviewResult(authenticated=True, allowed=allowed, principal=principal.name)


@router.get("/v1/whoami", **AUTHENTICATED)
async def whoami(principal: PrincipalDep) -> WhoAmI:
    """Who the caller's token says it is, and its grants."""
    return WhoAmI(name=principal.name, grants=[g.text() for g in principal.grants])
