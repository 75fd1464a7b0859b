"""Secrets: one value per name in an atespace, kept encrypted by the api-server and never shown
again (`ate create secret`, `ate get secrets`, `ate delete secret`).

A secret is what an actor must use without holding it: the egress proxy injects it into requests
to a host a template's credential rule names, so it never enters the actor's memory, nor any
snapshot of it. This module holds the rules every part shares: the names, the size limit and the
key ring's text format (the encryption itself is the api-server's, `api/secret_box.py`).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

SECRET_MAX_BYTES = 12 * 1024
"""The largest value a secret may hold, in bytes: a header value, a token, a registry's
credentials, a client key and certificate (a few KiB). In base64 it is exactly the longest string
a request body may carry (`domain.documents.MAX_STRING`, 16384 characters), so a binary value of
any size allowed can be sent."""

KEY_BYTES = 32
"""A key of the key ring: 32 random bytes (AES-256-GCM)."""

_KEY_ID = re.compile(r"[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?")


class SecretKeysError(ValueError):
    """The key ring's text cannot be read; the message names the line and what is wrong."""


@dataclass(frozen=True)
class SecretKey:
    """One key of the ring: its ID (stored with each value it encrypted) and its 32 bytes."""

    key_id: str
    material: bytes

    def __repr__(self) -> str:  # never the material, in a log or a traceback
        return f"SecretKey({self.key_id!r})"


def parse_secret_keys(text: str, source: str = "secret keys") -> list[SecretKey]:
    """Read a key ring: one key per line, `<key id> <base64 of 32 bytes>`; blank lines and lines
    starting with `#` are skipped. The first key is the primary one: new values are encrypted
    with it; the others only decrypt values encrypted before a rotation.

    Args:
        text: The file's (or the variable's) content; a comma also separates keys.
        source: What the text came from, named in errors (a path, an environment variable).

    Returns:
        The keys, the primary first.

    Raises:
        SecretKeysError: no key, a malformed line, a key that is not 32 bytes, a repeated ID.
    """
    keys: list[SecretKey] = []
    lines = [line.strip() for part in text.splitlines() for line in part.split(",")]
    for number, line in enumerate(lines, start=1):
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 2:
            raise SecretKeysError(f"{source}, entry {number}: want '<key id> <base64 of {KEY_BYTES} bytes>'")
        key_id, encoded = fields
        if not _KEY_ID.fullmatch(key_id):
            raise SecretKeysError(
                f"{source}, entry {number}: key id {key_id!r} must be 1-32 lowercase letters, digits or '-'"
            )
        try:
            material = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise SecretKeysError(f"{source}, entry {number} (key {key_id}): not base64") from None
        if len(material) != KEY_BYTES:
            raise SecretKeysError(
                f"{source}, entry {number} (key {key_id}): {len(material)} bytes, want {KEY_BYTES} "
                "(make one with: head -c 32 /dev/urandom | base64)"
            )
        if any(k.key_id == key_id for k in keys):
            raise SecretKeysError(f"{source}: key id {key_id} appears twice")
        keys.append(SecretKey(key_id, material))
    if not keys:
        raise SecretKeysError(f"{source}: no key (want lines '<key id> <base64 of {KEY_BYTES} bytes>')")
    return keys


def key_ring_line(key_id: str, material: bytes) -> str:
    """The line of a key ring for one key (what `ate dev` writes)."""
    return f"{key_id} {base64.b64encode(material).decode()}"
