"""What every sandbox gets for egress: the proxy settings in its environment and the egress CA
in its trust.

The environment (the template's own variables win, ``atelet.bundle``):

- ``HTTP_PROXY``, ``HTTPS_PROXY`` and their lower-case forms: ``http://169.254.100.1:3128``
  (``domain.local_endpoint.PROXY_URL``), when the node runs the proxy;
- ``NO_PROXY``/``no_proxy``: the local endpoint's address, ``localhost``, ``127.0.0.1``, ``::1``;
- ``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE``, ``NODE_EXTRA_CA_CERTS``,
  ``GIT_SSL_CAINFO``: ``CA_BUNDLE`` (OpenSSL, Go, Python's requests, curl, Node.js, git).

``CA_BUNDLE`` is a read-only bind mount of the node's bundle file (``write_ca_bundle``: the
system's roots and the egress CA, so spliced TLS to the real host verifies as before and
bumped TLS verifies against the egress CA). A mount rather than a file written into the
sandbox's root filesystem: ``runsc restore`` takes the mounts of the restoring bundle and
re-opens their sources on the host it runs on (measured with runsc 20240729: the file's new
content is what the restored sandbox reads, even of another size), so a sandbox restored on
another worker or node reads that node's bundle; a file written into the rootfs would live in
the sandbox's memory overlay and travel, stale, in its snapshot. runsc refuses to restore a
checkpoint that had a mount when the restoring bundle lacks it ("no server FD available"), and
accepts one more; so every gVisor sandbox gets the mount, on nodes with the proxy off too (the
bundle then holds the system's roots alone). A process that loaded its trust store before a
checkpoint keeps it after the restore: the egress CA must be the same on every node.

The microvm class boots from an initramfs and takes no bind mounts: the bundle's content is
written into the guest's initramfs at ``CA_BUNDLE`` (``atelet.drivers.microvm.prepare``), with
the same variables. It lives in the VM's memory, so a restored VM has the bundle it booted with:
the egress CA must be the same on every node (as for gVisor, whose processes keep what they read).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domain.local_endpoint import ADDRESS, PROXY_URL

CA_BUNDLE = "/etc/ate/ca-certificates.crt"
"""Where the sandbox finds the CA bundle."""
CA_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO")
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
NO_PROXY = f"{ADDRESS},localhost,127.0.0.1,::1"


@dataclass(frozen=True)
class SandboxEgress:
    """A sandbox's egress settings.

    Attributes:
        proxy: the node runs the egress proxy (the proxy variables are set).
        ca_mount: the host's CA bundle file to mount at ``CA_BUNDLE``, or None (no mount, no
            CA variables).
    """

    proxy: bool = False
    ca_mount: Path | None = None

    def env(self) -> dict[str, str]:
        """The environment variables (module doc)."""
        env: dict[str, str] = {}
        if self.proxy:
            env |= dict.fromkeys(PROXY_VARIABLES, PROXY_URL) | {"NO_PROXY": NO_PROXY, "no_proxy": NO_PROXY}
        if self.ca_mount is not None:
            env |= dict.fromkeys(CA_VARIABLES, CA_BUNDLE)
        return env

    def mounts(self) -> list[dict[str, Any]]:
        """The OCI mounts (the CA bundle, read-only), or none."""
        if self.ca_mount is None:
            return []
        return [{"destination": CA_BUNDLE, "type": "bind", "source": str(self.ca_mount), "options": ["rbind", "ro"]}]


def write_ca_bundle(path: Path, roots: Path | None, ca_cert: Path | None) -> Path:
    """Writes ``path`` (atomically, mode 0644): the PEM of ``roots`` (when it exists) then of
    ``ca_cert``. Returns ``path``.

    Raises:
        OSError: ``ca_cert`` cannot be read or ``path`` written.
    """
    parts = []
    if roots is not None and roots.exists():
        parts.append(roots.read_text().rstrip("\n") + "\n")
    if ca_cert is not None:
        parts.append(f"# ate egress CA ({ca_cert.name})\n" + ca_cert.read_text().rstrip("\n") + "\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(parts))
    tmp.chmod(0o644)
    os.replace(tmp, path)
    return path
