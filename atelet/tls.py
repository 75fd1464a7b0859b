"""The atelet's side of mutual TLS: its gRPC server credentials and who may call it.

The atelet serves gRPC only over TLS with client certificates required
(`grpc.ssl_server_credentials`' dynamic form): a client without a certificate, or with one the CA
`tls_ca` did not issue, fails the handshake. Of the clients that pass, `ControlPlaneOnly` lets
through only certificates whose CN is in `tls_allowed_clients` (default `ate-control-plane`) and
refuses the others with PERMISSION_DENIED. The server certificate is the node's own
(`tls_cert`/`tls_key`: CN and SAN DNS name = the node name; clients check that name).

The files are read again when they change (cert-manager's csi-driver renews them in place): the
next handshake uses the new pair. A pair caught half-written (the key of one, the certificate of
the other) is ignored until it is whole.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

log = logging.getLogger(__name__)


class TlsConfigError(ValueError):
    """The atelet's TLS settings are missing or their files unusable (the message says which)."""


@dataclass(frozen=True)
class NodeTlsFiles:
    """The node's certificate chain (leaf first) and key, and the CA its clients' certificates chain to."""

    cert: Path
    key: Path
    ca: Path

    @classmethod
    def of(cls, cert: Path | None, key: Path | None, ca: Path | None) -> NodeTlsFiles:
        """The files of the settings `tls_cert`, `tls_key` and `tls_ca`.

        Raises:
            TlsConfigError: one is unset.
        """
        missing = [
            flag for flag, value in (("--tls-cert", cert), ("--tls-key", key), ("--tls-ca", ca)) if value is None
        ]
        if missing:
            raise TlsConfigError(
                f"{', '.join(missing)} not set: the atelet serves only mutual TLS and needs the node's certificate "
                "(CN = the node name), its key and the CA of the control plane's certificate "
                "(env ATE_ATELET_TLS_CERT, ATE_ATELET_TLS_KEY, ATE_ATELET_TLS_CA; `ate dev` makes them itself)"
            )
        assert cert is not None and key is not None and ca is not None
        return cls(cert, key, ca)

    def stamp(self) -> tuple[tuple[int, int, int], ...]:
        """(inode, size, mtime) of the three files: changes when one is replaced or rewritten.

        Raises:
            OSError: a file is missing.
        """
        stamps = []
        for path in (self.cert, self.key, self.ca):
            st = os.stat(path)
            stamps.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(stamps)

    def read(self) -> tuple[bytes, bytes, bytes]:
        """(certificate chain, key, CA) as PEM bytes, checked to belong together.

        Raises:
            TlsConfigError: a file cannot be read, is not PEM, or the key is not the certificate's.
        """
        try:
            chain, key, ca = self.cert.read_bytes(), self.key.read_bytes(), self.ca.read_bytes()
        except OSError as error:
            raise TlsConfigError(f"cannot read the atelet's TLS files: {error}") from None
        check_pair(chain, key, str(self.cert), str(self.key))
        try:
            x509.load_pem_x509_certificates(ca)
        except ValueError:
            raise TlsConfigError(f"{self.ca} (tls_ca) holds no PEM certificate") from None
        return chain, key, ca


def check_pair(chain: bytes, key: bytes, cert_name: str, key_name: str) -> None:
    """Checks that `chain` is PEM certificates and `key` the private key of the first one.

    Raises:
        TlsConfigError: not PEM, an encrypted key, or a key of another certificate.
    """
    try:
        leaf = x509.load_pem_x509_certificates(chain)[0]
    except ValueError:
        raise TlsConfigError(f"{cert_name} (tls_cert) holds no PEM certificate") from None
    try:
        private = serialization.load_pem_private_key(key, password=None)
    except (ValueError, TypeError):
        raise TlsConfigError(f"{key_name} (tls_key) is not an unencrypted PEM private key") from None
    if private.public_key() != leaf.public_key():
        raise TlsConfigError(f"{key_name} (tls_key) is not the key of the certificate in {cert_name} (tls_cert)")


def server_credentials(files: NodeTlsFiles) -> grpc.ServerCredentials:
    """TLS server credentials that require a client certificate issued by `files.ca`, reloading the files on change.

    Raises:
        TlsConfigError: the files are unusable now (at start; later failures keep the last good pair).
    """
    chain, key, ca = files.read()
    stamp = [files.stamp()]

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        try:
            now = files.stamp()
            if now == stamp[0]:
                return None
            chain, key, ca = files.read()
        except (OSError, TlsConfigError) as error:
            log.warning("atelet TLS files changed but are not usable yet (%s); keeping the current ones", error)
            return None
        stamp[0] = now
        log.info("atelet TLS: certificate files changed, new handshakes use them")
        return grpc.ssl_server_certificate_configuration([(key, chain)], root_certificates=ca)

    initial = grpc.ssl_server_certificate_configuration([(key, chain)], root_certificates=ca)
    return grpc.dynamic_ssl_server_credentials(
        initial,
        fetch,  # type: ignore[arg-type]  # None keeps the current configuration (grpc's documented contract)
        require_client_authentication=True,
    )


def common_names(auth_context: Mapping[str, Iterable[bytes]]) -> list[str]:
    """The CNs of the peer's certificate in a gRPC auth context (empty: no certificate)."""
    return [value.decode(errors="replace") for value in auth_context.get("x509_common_name", ())]


Handler = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]


class ControlPlaneOnly(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Lets through the calls whose client certificate's CN is in `allowed`; refuses the others.

    A call without a peer certificate (impossible over the server's own credentials, but an
    interceptor must not assume its server's setup) is UNAUTHENTICATED; a certificate of another
    CN is PERMISSION_DENIED. Every RPC of the Atelet service is unary-unary; any other kind of
    method is refused outright.
    """

    def __init__(self, node: str, allowed: Collection[str]) -> None:
        self.node = node
        self.allowed = frozenset(allowed)
        self._wrapped: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}

    def refusal(self, auth_context: Mapping[str, Iterable[bytes]]) -> tuple[grpc.StatusCode, str] | None:
        """The status and message refusing a caller with this auth context, or None to let it call."""
        names = common_names(auth_context)
        if not names:
            return (grpc.StatusCode.UNAUTHENTICATED,
                    f"the atelet of node {self.node} takes calls only over mutual TLS with the control plane's "
                    "client certificate; this call presented none")  # fmt: skip
        if not self.allowed.intersection(names):
            return (grpc.StatusCode.PERMISSION_DENIED,
                    f"the atelet of node {self.node} takes calls only from the control plane's client certificate; "
                    f"this one has CN {names[0]!r}, which is not in the atelet's tls_allowed_clients")  # fmt: skip
        return None

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        """The method's handler, wrapped in the certificate check."""
        method = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            handler = await continuation(handler_call_details)
            if handler is None:
                return handler
            wrapped = self._wrapped[method] = self._checked(method, handler)
        return wrapped

    def _checked(self, method: str, handler: grpc.RpcMethodHandler[Any, Any]) -> grpc.RpcMethodHandler[Any, Any]:
        """`handler` behind the certificate check."""
        inner: Handler | None = handler.unary_unary  # type: ignore[assignment]  # an aio server's handlers are coroutines
        if inner is None:

            async def unsupported(_request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method}: only unary calls are served")

            return grpc.unary_unary_rpc_method_handler(unsupported)

        async def checked(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            refused = self.refusal(context.auth_context())
            if refused is not None:
                log.warning("refused %s from %s: %s", method, context.peer(), refused[1])
                await context.abort(*refused)
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            checked, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )
