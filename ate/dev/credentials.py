"""The credentials `ate dev` makes so that nothing runs open: a bootstrap token for the
api-server, the key ring that seals its secrets and the egress CA of the atelet's proxy (the
CA whose certificates the proxy shows an actor where it puts a credential into its requests),
then, through the API, a cluster-admin token for the local user (written to the ate
config as context `ate-dev`) and a `router` token for the router.

All of them live in `<data dir>/credentials/`, readable by their owner only, and are reused by
the next `ate dev` while the database still knows them (a fresh database gets fresh tokens).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from ate.cli.client import ApiClient, ApiError
from ate.cli.config import write_context
from ate.dev.certificates import CertificateAuthority
from domain.secrets import KEY_BYTES, key_ring_line

CONTEXT = "ate-dev"
"""The ate config context `ate dev` writes."""

TOKENS = {"local-admin": ["cluster-admin"], "router": ["router"]}
"""The tokens `ate dev` creates, by file name: their grants."""


def _write_secret(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(text + "\n")
    os.replace(path.with_suffix(".tmp"), path)


class DevCredentials:
    """The files under `<data dir>/credentials/`.

    Args:
        data_dir: The stack's data dir.
    """

    def __init__(self, data_dir: Path) -> None:
        self.directory = data_dir / "credentials"

    @property
    def bootstrap_file(self) -> Path:
        """The api-server's bootstrap token (made at the first start)."""
        return self.directory / "bootstrap-token"

    def token_file(self, name: str) -> Path:
        """The file of token `name` (a key of TOKENS)."""
        return self.directory / f"{name}.token"

    @property
    def admin_file(self) -> Path:
        """The local user's cluster-admin token."""
        return self.token_file("local-admin")

    def ensure_bootstrap(self) -> Path:
        """Make the bootstrap token unless it exists; returns its file."""
        if not self.bootstrap_file.exists():
            _write_secret(self.bootstrap_file, secrets.token_urlsafe(32))
        return self.bootstrap_file

    @property
    def secret_keys_file(self) -> Path:
        """The api-server's key ring for secrets (`domain.secrets.parse_secret_keys`)."""
        return self.directory / "secret-keys"

    def ensure_secret_keys(self) -> Path:
        """Make a key ring of one fresh key (`dev1`) unless it exists; returns its file. A key
        kept with the database: a new key would leave its secrets unopenable."""
        if not self.secret_keys_file.exists():
            _write_secret(self.secret_keys_file, key_ring_line("dev1", secrets.token_bytes(KEY_BYTES)))
        return self.secret_keys_file

    @property
    def egress_ca_files(self) -> tuple[Path, Path]:
        """The egress CA's certificate and key (PEM) the atelet's egress proxy signs with."""
        return self.directory / "egress-ca.crt", self.directory / "egress-ca.key"

    def ensure_egress_ca(self) -> tuple[Path, Path]:
        """Make the egress CA (ECDSA P-256, ten years) unless a good pair exists; returns its
        files. Kept across runs: actors' snapshots trust it, and a new one would fail their
        TLS to a host with a credential until they restart."""
        cert, key = self.egress_ca_files
        try:
            CertificateAuthority.load(cert.read_bytes(), key.read_bytes())
            return cert, key
        except (OSError, ValueError):
            pass
        ca = CertificateAuthority.create("ate dev egress CA")
        _write_secret(key, ca.key_pem.decode().strip())
        _write_secret(cert, ca.cert_pem.decode().strip())
        return cert, key

    def admin_token(self) -> str | None:
        """The local user's token, once `ensure_tokens` has run."""
        try:
            return self.admin_file.read_text().strip() or None
        except FileNotFoundError:
            return None

    def ensure_tokens(self, api_url: str) -> None:
        """Check each token of TOKENS against the API (`/v1/whoami`); create the missing or unknown
        ones with the bootstrap token.

        Raises:
            ApiError: the API refused or failed.
        """
        bootstrap = self.bootstrap_file.read_text().strip()
        with ApiClient(api_url, timeout=10, token=bootstrap) as admin:
            for name, grants in TOKENS.items():
                path = self.token_file(name)
                if path.exists() and _valid(api_url, path.read_text().strip()):
                    continue
                created = admin.create_token(f"ate-dev-{name}", grants, None)
                _write_secret(path, created["token"])

    def write_config(self, api_url: str) -> Path:
        """Point context `ate-dev` of the ate config at `api_url` and the admin token; make it
        current. Returns the config file."""
        return write_context(CONTEXT, api_url, self.admin_file, make_current=True)


def _valid(api_url: str, token: str) -> bool:
    try:
        with ApiClient(api_url, timeout=10, token=token) as api:
            api.whoami()
        return True
    except ApiError as error:
        if error.status == 401:
            return False
        raise
