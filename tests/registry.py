"""A real container registry for the tests: Debian's `docker-registry` (the distribution
project's registry, installed by scripts/install.sh) on a free loopback port, its storage in a
temp dir; images pushed to it with skopeo. Plain HTTP (a registry on loopback may be), or, given
`users`, TLS (a certificate of a CA made for it) and HTTP basic auth (an htpasswd file, bcrypt
as the registry requires). Nothing it does leaves the machine."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import bcrypt

from ate.dev.certificates import CertificateAuthority

REPO = Path(__file__).resolve().parents[1]


@dataclass
class LocalRegistry:
    """A running registry: its `host:port`, its process and data dir."""

    address: str
    directory: Path
    process: subprocess.Popen[bytes]
    pusher: tuple[str, str] | None = None
    """The user and password pushes use (the first of `users`), when the registry asks for one."""

    def push(self, source: str, name: str) -> str:
        """Copies `source` (a containers/image reference, e.g. `oci:examples/counter/oci:latest`) to
        `<address>/<name>`; returns the manifest digest skopeo wrote (`--digestfile`)."""
        if source.startswith("oci:") and not source.startswith("oci:/"):  # relative to the repository
            source = f"oci:{REPO}/{source[len('oci:'):]}"
        digest_file = self.directory / f"digest-{time.monotonic_ns()}"
        creds = [f"--dest-creds={self.pusher[0]}:{self.pusher[1]}"] if self.pusher else ["--dest-no-creds"]
        subprocess.run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false", *creds, f"--digestfile={digest_file}",
                        source, f"docker://{self.address}/{name}"], check=True, capture_output=True)  # fmt: skip
        return digest_file.read_text().strip()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def local_registry(users: dict[str, str] | None = None) -> Iterator[LocalRegistry]:
    """Starts a registry (with TLS and basic auth for `users`, `{name: password}`, when given) and
    waits for its port to answer; stops it and removes its data after."""
    directory = Path(tempfile.mkdtemp(prefix="ate-registry-"))
    port = _free_port()
    config = directory / "config.yml"
    text = (f"version: 0.1\nlog: {{level: error}}\nstorage:\n  filesystem: {{rootdirectory: {directory}/data}}\n"
            f"http:\n  addr: 127.0.0.1:{port}\n")  # fmt: skip
    if users:
        issued = CertificateAuthority.create("test registry CA").issue("localhost", server=True,
                                                                         dns_names=["localhost"])  # fmt: skip
        (directory / "tls.crt").write_bytes(issued.cert_pem)
        (directory / "tls.key").write_bytes(issued.key_pem)
        (directory / "htpasswd").write_text("".join(
            f"{name}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()}\n"
            for name, password in users.items()))  # fmt: skip
        text += (f"  tls: {{certificate: {directory}/tls.crt, key: {directory}/tls.key}}\n"
                 f"auth:\n  htpasswd: {{realm: ate-test, path: {directory}/htpasswd}}\n")  # fmt: skip
    config.write_text(text)
    process = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
    pusher = next(iter(users.items())) if users else None
    registry = LocalRegistry(f"127.0.0.1:{port}", directory, process, pusher)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("docker-registry did not start") from None
                time.sleep(0.05)
        yield registry
    finally:
        registry.stop()
        shutil.rmtree(directory, ignore_errors=True)
