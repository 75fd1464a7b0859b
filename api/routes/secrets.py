"""/v1/atespaces/{atespace}/secrets: secrets (create, list, get, delete). A value goes in once and
never comes out: answers carry names and metadata only, PostgreSQL holds the value sealed by the
api-server's key ring (`api/secret_box.py`). An `opaque` secret is used only by the egress proxy's
injection of a credential header (issue 28); a `registry` secret (a user name and password for one
registry) only by the pulls of the images of templates that list it in `imagePullSecrets` (issue 29)."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field

from api.access.guard import PrincipalDep, needs
from api.deps import StoreDep
from api.errors import ApiError, InvalidArgument
from api.names import check_name
from api.secret_box import SecretBox
from api.strict import Strict
from domain.access import Permission
from domain.reasons import Reason
from domain.registry_credentials import SecretType, check_registry_credentials
from domain.secrets import SECRET_MAX_BYTES
from store.secrets import SecretRecord

router = APIRouter(tags=["secrets"])
PREFIX = "/v1/atespaces/{atespace}/secrets"


class SecretCreate(Strict):
    """POST body of a secret: its name and, for an `opaque` one, exactly one of `value` and
    `value_base64`; for a `registry` one, `registry`, `username` and `password`."""

    name: str = Field(description="a DNS-1123 label, unique per atespace")
    type: SecretType = Field(default=SecretType.OPAQUE, description="opaque (an egress credential's value) or "
                             "registry (credentials for a template's imagePullSecrets)")  # fmt: skip
    value: str | None = Field(default=None, description="opaque: the value as text (stored as its UTF-8 bytes)")
    value_base64: str | None = Field(default=None, description="opaque: the value's bytes in base64 (binary values)")
    registry: str | None = Field(default=None, description="registry: the registry's host[:port], as image "
                                 "references name it (e.g. registry.example.com, 127.0.0.1:5000)")  # fmt: skip
    username: str | None = Field(default=None, description="registry: the user name")
    password: str | None = Field(default=None, description="registry: the password or access token")


class SecretPublic(BaseModel):
    """A secret as the API shows it: never its value."""

    atespace: str
    name: str
    type: SecretType
    registry: str | None = Field(default=None, description="the registry a registry secret is for")
    size_bytes: int = Field(description="the value's length in bytes")
    key_id: str = Field(description="the key of the api-server's key ring that sealed it")
    created_by: str
    created_at: datetime
    updated_at: datetime


class SecretList(BaseModel):
    """The secrets of one atespace, by name."""

    items: list[SecretPublic]


def _view(record: SecretRecord) -> SecretPublic:
    return SecretPublic(
        atespace=record.atespace, name=record.name, type=SecretType(record.type), registry=record.registry,
        size_bytes=record.size_bytes, key_id=record.key_id,
        created_by=record.created_by, created_at=record.created_at, updated_at=record.updated_at,
    )  # fmt: skip


def secret_box(request: Request) -> SecretBox:
    """The api-server's key ring.

    Raises:
        ApiError: 503 Unavailable when the api-server has none, saying how to give it one.
    """
    box: SecretBox | None = getattr(request.app.state, "secret_box", None)
    if box is None:
        raise ApiError(
            "secrets are not enabled on this api-server: give it a key ring with ATE_SECRET_KEYS_FILE (a file "
            "of lines '<key id> <base64 of 32 bytes>', e.g. 'k1 '$(head -c 32 /dev/urandom | base64)) or "
            "ATE_SECRET_KEYS, and restart it (docs/security.md, 'Secrets')",
            reason=Reason.UNAVAILABLE,
        )
    return box


def _registry_value_of(body: SecretCreate) -> bytes:
    """A registry secret's value (`RegistryCredentials.value`); InvalidArgument naming the field
    when one is missing or wrong, or when an opaque secret's field is given."""
    for extra in ("value", "value_base64"):
        if getattr(body, extra) is not None:
            raise InvalidArgument(f"{extra}: a registry secret takes registry, username and password instead",
                                  {"field": extra})  # fmt: skip
    for needed in ("registry", "username", "password"):
        if getattr(body, needed) is None:
            raise InvalidArgument(f"{needed}: required for a secret of type registry", {"field": needed})
    try:
        credentials = check_registry_credentials(body.registry or "", body.username or "", body.password or "")
    except ValueError as error:
        raise InvalidArgument(str(error), {"field": str(error).split(":", 1)[0]}) from None
    value = credentials.value()
    if len(value) > SECRET_MAX_BYTES:
        raise InvalidArgument(f"password: the credentials are {len(value)} bytes; a secret holds at most "
                              f"{SECRET_MAX_BYTES} bytes", {"field": "password"})  # fmt: skip
    return value


def _value_of(body: SecretCreate) -> bytes:
    """The value's bytes; InvalidArgument naming the field when there is not exactly one, when
    it does not decode, or when it is empty or too large."""
    if body.type is SecretType.REGISTRY:
        return _registry_value_of(body)
    for extra in ("registry", "username", "password"):
        if getattr(body, extra) is not None:
            raise InvalidArgument(f"{extra}: only a secret of type registry takes it (give type: registry)",
                                  {"field": extra})  # fmt: skip
    if (body.value is None) == (body.value_base64 is None):
        raise InvalidArgument("give exactly one of value and value_base64", {"field": "value"})
    field = "value" if body.value is not None else "value_base64"
    if body.value is not None:
        value = body.value.encode()
    else:
        try:
            value = base64.b64decode(body.value_base64 or "", validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgument("value_base64 is not base64", {"field": field}) from None
    if not value:
        raise InvalidArgument(f"{field} is empty: a secret holds at least one byte", {"field": field})
    if len(value) > SECRET_MAX_BYTES:
        raise InvalidArgument(
            f"{field} is {len(value)} bytes; a secret holds at most {SECRET_MAX_BYTES} bytes", {"field": field}
        )
    return value


@router.post(PREFIX, status_code=201, **needs(Permission.SECRETS_MANAGE))
async def create_secret(
    atespace: str, body: SecretCreate, request: Request, store: StoreDep, principal: PrincipalDep
) -> SecretPublic:
    """Create a secret. The answer, like every other, carries its metadata and never its value."""
    check_name("name", body.name)
    value = _value_of(body)
    sealed = secret_box(request).seal(atespace, body.name, value)
    registry = body.registry if body.type is SecretType.REGISTRY else None
    record = await store.secrets.create(atespace, body.name, sealed.key_id, sealed.sealed, len(value), principal.name,
                                        body.type.value, registry)  # fmt: skip
    return _view(record)


@router.get(PREFIX, **needs(Permission.SECRETS_READ))
async def list_secrets(atespace: str, store: StoreDep) -> SecretList:
    """The atespace's secrets by name (names and metadata only)."""
    return SecretList(items=[_view(r) for r in await store.secrets.all(atespace)])


@router.get(PREFIX + "/{name}", **needs(Permission.SECRETS_READ))
async def get_secret(atespace: str, name: str, store: StoreDep) -> SecretPublic:
    """One secret's metadata (never its value)."""
    return _view(await store.secrets.get(atespace, name))


@router.delete(PREFIX + "/{name}", status_code=204, **needs(Permission.SECRETS_MANAGE))
async def delete_secret(atespace: str, name: str, store: StoreDep) -> Response:
    """Delete a secret at once."""
    await store.secrets.delete(atespace, name)
    return Response(status_code=204)
