"""Sealing and opening secrets' values with the api-server's key ring (AES-256-GCM from
`cryptography`): the store keeps only what `SecretBox.seal` returns.

Each value is sealed with the ring's primary key, a fresh 96-bit nonce, and the secret's atespace
and name as associated data, so a sealed value copied onto another secret's row does not open. A
rotation puts a new key first in the ring and keeps the old ones after it: values sealed by an
old key still open, and `reseal_all` (run by every api-server at start) seals them again with the
primary key; once `ate get secrets -o wide` shows none under the old key, its line can go.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from domain.secrets import SecretKey, SecretKeysError, parse_secret_keys
from store.secrets import Secrets

log = logging.getLogger(__name__)

NONCE_BYTES = 12


class SecretKeyMissing(Exception):
    """A sealed value names a key the ring does not hold (it was removed before the rotation
    re-sealed everything under the new one)."""


class SecretOpenFailed(Exception):
    """A sealed value does not open with its key: it was changed, or belongs to another secret."""


@dataclass(frozen=True)
class Sealed:
    """What the store keeps of a value: the key it was sealed by, and nonce + ciphertext + tag."""

    key_id: str
    sealed: bytes


class SecretBox:
    """Seal and open values with a key ring (the primary key first).

    Args:
        keys: The ring (`domain.secrets.parse_secret_keys`), at least one key.
    """

    def __init__(self, keys: list[SecretKey]) -> None:
        if not keys:
            raise SecretKeysError("the key ring is empty")
        self.keys = keys
        self._ciphers = {k.key_id: AESGCM(k.material) for k in keys}

    @property
    def primary_key_id(self) -> str:
        """The key new values are sealed with."""
        return self.keys[0].key_id

    def seal(self, atespace: str, name: str, value: bytes) -> Sealed:
        """Seal `value` for secret `atespace/name` with the primary key."""
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[self.primary_key_id].encrypt(nonce, value, _associated(atespace, name))
        return Sealed(self.primary_key_id, nonce + sealed)

    def open(self, atespace: str, name: str, key_id: str, sealed: bytes) -> bytes:
        """The value of secret `atespace/name` sealed by `key_id`.

        Raises:
            SecretKeyMissing: the ring has no key `key_id`.
            SecretOpenFailed: the sealed bytes do not open for this secret with that key.
        """
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise SecretKeyMissing(
                f"secret {atespace}/{name} is sealed by key {key_id}, which the api-server's key ring does "
                f"not hold (keys: {', '.join(self._ciphers)}); put that key back after the primary one"
            )
        try:
            return cipher.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], _associated(atespace, name))
        except InvalidTag:
            raise SecretOpenFailed(f"secret {atespace}/{name} does not open with key {key_id}: it was altered") from None


def _associated(atespace: str, name: str) -> bytes:
    return f"ate-secret {atespace}/{name}".encode()


def load_secret_box(keys_file: Path | None, keys_text: str | None) -> SecretBox | None:
    """The api-server's box from `ATE_SECRET_KEYS_FILE` (a path) or `ATE_SECRET_KEYS` (the ring's
    text itself); None when neither is set (the secrets routes then answer 503 saying so).

    Raises:
        SecretKeysError: the file cannot be read or the ring is malformed (the api-server does not start).
    """
    if keys_file is not None:
        try:
            text = keys_file.read_text()
        except OSError as error:
            raise SecretKeysError(f"secret_keys_file {keys_file}: {error.strerror}") from None
        return SecretBox(parse_secret_keys(text, f"secret_keys_file {keys_file}"))
    if keys_text:
        return SecretBox(parse_secret_keys(keys_text, "ATE_SECRET_KEYS"))
    return None


async def reseal_all(box: SecretBox, secrets: Secrets) -> int:
    """Seal again with the primary key every secret sealed by another key of the ring; returns
    how many were re-sealed. One it cannot open (its key was removed, or its bytes altered) is
    logged and left as it is."""
    done = 0
    skipped: set[tuple[str, str]] = set()
    while True:
        batch = [s for s in await secrets.sealed_by_others(box.primary_key_id, 100 + len(skipped))
                 if (s.atespace, s.name) not in skipped]  # fmt: skip
        if not batch:
            break
        for old in batch:
            try:
                value = box.open(old.atespace, old.name, old.key_id, old.sealed)
            except (SecretKeyMissing, SecretOpenFailed) as error:
                log.error("cannot re-seal: %s", error)
                skipped.add((old.atespace, old.name))
                continue
            new = box.seal(old.atespace, old.name, value)
            if await secrets.reseal(old, new.key_id, new.sealed):
                done += 1
    if done:
        log.info("re-sealed %d secrets with key %s", done, box.primary_key_id)
    return done
