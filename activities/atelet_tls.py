"""The control plane's side of the atelet's mutual TLS: its client identity and the node it expects.

Every gRPC channel to an atelet is a TLS channel that presents the control plane's client
certificate (CN `ate-control-plane`, issued by the CA the atelets trust) and accepts only a
server certificate that the CA `ca` issued for the node the caller means: atelets are reached by
IP, so the channel checks the node name instead of the address (`grpc.ssl_target_name_override`).
A channel that reaches another node's atelet at that address fails the handshake.

Files are re-read when they change (a renewed certificate); channels opened before keep the
credentials they were made with until their owner replaces them (`AteletClientTls.generation`).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization


class AteletTlsError(ValueError):
    """The control plane's TLS settings for atelets are missing or their files unusable."""


def target_options(node: str) -> list[tuple[str, str]]:
    """Channel options that make a TLS channel accept only node `node`'s certificate."""
    return [("grpc.ssl_target_name_override", node)]


@dataclass
class AteletClientTls:
    """The client certificate chain (PEM, leaf first), its key and the CA of the atelets' certificates.

    Args:
        cert / key / ca: PEM files (settings `atelet_client_tls_cert`, `..._key`, `..._ca` of
            the process using them).
    """

    cert: Path
    key: Path
    ca: Path
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _stamp: tuple[int, ...] = field(default=(), init=False, repr=False)
    _credentials: grpc.ChannelCredentials | None = field(default=None, init=False, repr=False)
    generation: int = field(default=0, init=False)
    """Counts the loads of the files: a channel made under an older generation holds old credentials."""

    @classmethod
    def from_settings(cls, cert: Path | None, key: Path | None, ca: Path | None, prefix: str) -> AteletClientTls:
        """The identity of three settings named `<prefix>_cert`, `_key` and `_ca`.

        Raises:
            AteletTlsError: one is unset (the message names the environment variables).
        """
        missing = [
            f"{prefix}_{part}".upper() for part, value in (("cert", cert), ("key", key), ("ca", ca)) if value is None
        ]
        if missing:
            raise AteletTlsError(
                f"{', '.join(missing)} not set: atelets take calls only over mutual TLS, with the control plane's "
                "client certificate (CN ate-control-plane), its key, and the CA that issued the nodes' certificates "
                "(`ate dev` makes them itself)"
            )
        assert cert is not None and key is not None and ca is not None
        return cls(cert, key, ca)

    def _files_stamp(self) -> tuple[int, ...]:
        stamp: list[int] = []
        for path in (self.cert, self.key, self.ca):
            st = os.stat(path)
            stamp += [st.st_ino, st.st_size, st.st_mtime_ns]
        return tuple(stamp)

    def _load(self) -> grpc.ChannelCredentials:
        try:
            chain, key, ca = self.cert.read_bytes(), self.key.read_bytes(), self.ca.read_bytes()
        except OSError as error:
            raise AteletTlsError(f"cannot read the control plane's TLS files for atelets: {error}") from None
        try:
            leaf = x509.load_pem_x509_certificates(chain)[0]
            private = serialization.load_pem_private_key(key, password=None)
            x509.load_pem_x509_certificates(ca)
        except (ValueError, TypeError):
            raise AteletTlsError(
                f"{self.cert}, {self.key} or {self.ca} is not PEM (certificates, an unencrypted key)"
            ) from None
        if private.public_key() != leaf.public_key():
            raise AteletTlsError(f"{self.key} is not the key of the certificate in {self.cert}")
        return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=chain)

    def credentials(self) -> grpc.ChannelCredentials:
        """The current channel credentials, loaded again if a file changed since.

        Raises:
            AteletTlsError: the files cannot be read or do not belong together (at the first load;
                later, a half-renewed pair keeps the credentials loaded before).
        """
        with self._lock:
            try:
                stamp = self._files_stamp()
            except OSError as error:
                if self._credentials is None:
                    raise AteletTlsError(f"cannot read the control plane's TLS files for atelets: {error}") from None
                return self._credentials
            if self._credentials is None or stamp != self._stamp:
                try:
                    self._credentials = self._load()
                except AteletTlsError:
                    if self._credentials is None:
                        raise
                    return self._credentials
                self._stamp = stamp
                self.generation += 1
            return self._credentials

    def channel(self, address: str, node: str) -> grpc.aio.Channel:
        """A new asyncio channel to the atelet of node `node` at `address` (`host:port`)."""
        return grpc.aio.secure_channel(address, self.credentials(), options=target_options(node))

    def sync_channel(self, address: str, node: str) -> grpc.Channel:
        """A new blocking channel to the atelet of node `node` at `address` (`host:port`)."""
        return grpc.secure_channel(address, self.credentials(), options=target_options(node))
