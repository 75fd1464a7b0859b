"""Registry credentials: the value of a secret of type `registry` (issue 29, pull secrets).

A template lists the secrets its images are pulled with (`spec.imagePullSecrets: [{name}]`, as a
Kubernetes pod spec does); each such secret is for one registry (`host[:port]`, exactly as image
references name it) and holds a user name and a password (or token), which the api-server and the
nodes give to containers/image (skopeo) in an auth file of their own, never on a command line
(which any user of the machine may read) and never from the machine's own logins (whose
credentials are the operator's, not the atespace's).

The sealed value is JSON `{"username", "password"}`; the registry is the secret's metadata (it is
shown, the credentials never are). Standard library only.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from domain.image_references import parse_registry_host

MAX_USERNAME_LENGTH = 256
MAX_IMAGE_PULL_SECRETS = 10
"""At most this many `imagePullSecrets` per template."""


class SecretType(StrEnum):
    """What a secret's value is: `opaque` (bytes an egress credential header carries) or
    `registry` (credentials of one container registry, for a template's `imagePullSecrets`)."""

    OPAQUE = "opaque"
    REGISTRY = "registry"


@dataclass(frozen=True)
class RegistryCredentials:
    """A user name and password for the registry `registry` (`host[:port]`), from the secret
    `secret` (`<atespace>/<name>`, named in errors: which credentials a registry refused)."""

    registry: str
    username: str
    password: str
    secret: str = ""

    def __repr__(self) -> str:  # never the password, in a log or a traceback
        return f"RegistryCredentials({self.registry!r}, {self.username!r}, secret={self.secret!r})"

    def value(self) -> bytes:
        """The secret's value to seal: JSON `{"username", "password"}`."""
        return json.dumps({"username": self.username, "password": self.password}).encode()

    def label(self) -> str:
        """`<secret> (user <username>)`: how an error names the credentials a registry refused."""
        return f"{self.secret} (user {self.username})"

    def document(self) -> dict[str, str]:
        """`{"secret", "registry", "username", "password"}`: what a node is given (`of_document`)."""
        return {"secret": self.secret, "registry": self.registry, "username": self.username, "password": self.password}


def check_registry_credentials(registry: str, username: str, password: str) -> RegistryCredentials:
    """The credentials, checked.

    Raises:
        ValueError: the message starts with the field (`registry`, `username`, `password`) and
            says what is allowed: a registry `host[:port]` as in an image reference, a user name
            of 1-256 printable characters without `:` (HTTP basic auth ends the name at the first
            colon), a non-empty password without line breaks.
    """
    try:
        parse_registry_host(registry)
    except ValueError as error:
        raise ValueError(f"registry: {error}") from None
    if not username or len(username) > MAX_USERNAME_LENGTH or ":" in username or not username.isprintable():
        raise ValueError(f"username: want 1-{MAX_USERNAME_LENGTH} printable characters without ':' "
                         "(HTTP basic auth ends the user name at the first colon)")  # fmt: skip
    if not password or any(c in password for c in "\r\n\0"):
        raise ValueError("password: want a non-empty password (or token) without line breaks")
    return RegistryCredentials(registry, username, password)


def parse_registry_value(registry: str, value: bytes, secret: str = "") -> RegistryCredentials:
    """The credentials of a registry secret's opened `value` (`RegistryCredentials.value`).

    Raises:
        ValueError: the value is not such JSON (a secret made as opaque and relabelled, or damaged).
    """
    try:
        document = json.loads(value)
        credentials = check_registry_credentials(registry, str(document["username"]), str(document["password"]))
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"secret {secret or '?'}: not registry credentials ({error})") from None
    return replace(credentials, secret=secret)


def of_document(document: Any) -> RegistryCredentials:
    """`RegistryCredentials.document`'s inverse (what a node reads from the API).

    Raises:
        ValueError: a field is missing or wrong.
    """
    if not isinstance(document, dict):
        raise ValueError("registry credentials: want an object")
    credentials = check_registry_credentials(str(document.get("registry") or ""), str(document.get("username") or ""),
                                             str(document.get("password") or ""))  # fmt: skip
    return replace(credentials, secret=str(document.get("secret") or ""))


def auth_file(credentials: RegistryCredentials) -> str:
    """The containers-auth.json(5) document (also Docker's config.json form) giving `credentials`
    for their registry: `{"auths": {"<host[:port]>": {"auth": base64("<user>:<password>")}}}`."""
    token = base64.b64encode(f"{credentials.username}:{credentials.password}".encode()).decode()
    return json.dumps({"auths": {credentials.registry: {"auth": token}}})


def write_auth_file(path: Path, credentials: RegistryCredentials) -> Path:
    """Writes `auth_file(credentials)` to `path`, a new file of mode 0600 (it must not exist:
    nobody else's file is ever written to); returns `path`.

    Raises:
        OSError: `path` exists or its dir cannot be written.
    """
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(auth_file(credentials))
    return path


def attempts(credentials: Sequence[RegistryCredentials], registry: str) -> list[RegistryCredentials | None]:
    """What a look-up of an image of `registry` tries, in order: those of `credentials` for that
    registry, or one anonymous try (None) when there are none."""
    mine: list[RegistryCredentials | None] = [c for c in credentials if c.registry == registry]
    return mine or [None]


def refused_hint(tried: Sequence[RegistryCredentials]) -> str:
    """What to do when the registry refused each of `tried` (named by `label`)."""
    return (f"the registry refused the credentials of pull secret {', '.join(c.label() for c in tried)}: check the "
            "user name and password (or token) and that they may pull this repository; replace the secret with "
            "'ate delete secret' and 'ate create secret ... --type registry'")


def pull_secret_names(spec_document: dict[str, Any]) -> list[str]:
    """The names a template spec document lists under `imagePullSecrets`, in order."""
    return [str(entry["name"]) for entry in spec_document.get("imagePullSecrets") or [] if isinstance(entry, dict)]
