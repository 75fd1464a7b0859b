"""The test session's certificates for the atelet's mutual TLS: one CA (in a temporary directory
removed at exit), the control plane's client certificate, and a certificate per node asked for
(`ate.dev.certificates`, as `ate dev` makes them)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from activities.atelet_tls import AteletClientTls
from ate.dev.certificates import LocalCertificates, ensure_local_certificates

_CERTIFICATES = Path(tempfile.mkdtemp(prefix="ate-tls-"))
atexit.register(shutil.rmtree, _CERTIFICATES, True)


def certificates(*nodes: str) -> LocalCertificates:
    """The test session's CA, control-plane certificate and a certificate for each of `nodes`."""
    return ensure_local_certificates(_CERTIFICATES, nodes)


def control_plane_tls() -> AteletClientTls:
    """The control plane's client identity towards the test atelets."""
    files = certificates().control_plane
    return AteletClientTls(files.cert, files.key, files.ca)


def tls_flags(node: str) -> list[str]:
    """The atelet command-line flags of node `node`'s certificate, key and CA."""
    files = certificates(node).node(node)
    return ["--tls-cert", str(files.cert), "--tls-key", str(files.key), "--tls-ca", str(files.ca)]
