"""A real Kubernetes control plane for the tests, envtest-style: etcd, kube-apiserver v1.20.2 and
kube-controller-manager (built once per machine by scripts/kube-apiserver.sh; KUBERNETES.md),
no kubelet and no scheduler. Tests play the kubelet: they create pods and patch their status.

The API server runs with RBAC, a static token for the admin (group system:masters), service
account tokens signed by a key made here, and `--watch-cache=false`, so that an old
resourceVersion after an etcd compaction is answered with 410 Gone as on a busy cluster.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

REPO = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "ate-test-admin-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kube_binaries() -> Path:
    """The directory with kube-apiserver and kube-controller-manager, built when missing."""
    done = subprocess.run(["bash", str(REPO / "scripts" / "kube-apiserver.sh")], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/kube-apiserver.sh failed:\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


@dataclass
class Cluster:
    """A running control plane: where it is, and how to reach it as admin."""

    root: Path
    url: str
    kubeconfig: Path
    etcd_url: str
    processes: dict[str, subprocess.Popen[bytes]]

    def kubeconfig_for(self, token: str, name: str) -> Path:
        """A kubeconfig that authenticates with `token` (a service account's, for RBAC tests)."""
        path = self.root / f"kubeconfig-{name}"
        path.write_text(yaml.safe_dump(_kubeconfig(self.url, token, name)))
        return path

    def compact(self) -> None:
        """Compact etcd at its current revision: older resourceVersions now answer 410 Gone."""
        status = subprocess.run(
            ["etcdctl", f"--endpoints={self.etcd_url}", "endpoint", "status", "--write-out=json"],
            capture_output=True, text=True, check=True, env={**os.environ, "ETCDCTL_API": "3"},
        )  # fmt: skip
        revision = int(yaml.safe_load(status.stdout)[0]["Status"]["header"]["revision"])
        subprocess.run(
            ["etcdctl", f"--endpoints={self.etcd_url}", "compact", str(revision)],
            capture_output=True, check=True, env={**os.environ, "ETCDCTL_API": "3"},
        )  # fmt: skip

    def start_controller_manager(self) -> None:
        """kube-controller-manager: ReplicaSets, garbage collection, service account tokens."""
        bins = kube_binaries()
        log = open(self.root / "kube-controller-manager.log", "wb")
        self.processes["controller-manager"] = subprocess.Popen(
            [
                str(bins / "kube-controller-manager"), f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false", "--port=0", "--secure-port=0",
                f"--service-account-private-key-file={self.root / 'sa.key'}",
                f"--root-ca-file={self.root / 'certs' / 'apiserver.crt'}",
                "--use-service-account-credentials=true", "--controllers=*",
                "--concurrent-gc-syncs=5",
            ],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()

    def stop(self) -> None:
        for name in ("controller-manager", "apiserver", "etcd"):
            process = self.processes.pop(name, None)
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def _kubeconfig(url: str, token: str, name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": url, "insecure-skip-tls-verify": True}}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": "test", "user": name}}],
        "current-context": name,
    }


def _wait_ready(url: str, timeout: float, process: subprocess.Popen[bytes], log: Path) -> None:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"kube-apiserver exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        request = urllib.request.Request(f"{url}/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        with contextlib.suppress(OSError, urllib.error.URLError):
            with urllib.request.urlopen(request, timeout=2, context=context) as response:
                if response.status == 200:
                    return
        time.sleep(0.2)
    raise RuntimeError(f"kube-apiserver not ready in {timeout:g} s:\n{log.read_text()[-3000:]}")


def start_cluster(root: Path) -> Cluster:
    """etcd and kube-apiserver under `root`; the controller manager starts later (after the CRDs)."""
    bins = kube_binaries()
    etcd_bin = shutil.which("etcd")
    if etcd_bin is None:
        raise RuntimeError("etcd is missing: scripts/kube-apiserver.sh installs Debian's etcd-server")
    root.mkdir(parents=True, exist_ok=True)
    client_port, peer_port, api_port = free_port(), free_port(), free_port()
    etcd_url = f"http://127.0.0.1:{client_port}"
    processes: dict[str, subprocess.Popen[bytes]] = {}
    etcd_log = open(root / "etcd.log", "wb")
    processes["etcd"] = subprocess.Popen(
        [
            etcd_bin, f"--data-dir={root / 'etcd'}", f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}", f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-cluster=default=http://127.0.0.1:{peer_port}", "--unsafe-no-fsync",
        ],
        stdout=etcd_log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    etcd_log.close()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (root / "sa.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    (root / "sa.pub").write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    (root / "tokens.csv").write_text(f"{ADMIN_TOKEN},ate-admin,1,system:masters\n")
    url = f"https://127.0.0.1:{api_port}"
    api_log = open(root / "kube-apiserver.log", "wb")
    processes["apiserver"] = subprocess.Popen(
        [
            str(bins / "kube-apiserver"), f"--etcd-servers={etcd_url}", "--bind-address=127.0.0.1",
            f"--secure-port={api_port}", "--insecure-port=0", f"--cert-dir={root / 'certs'}",
            f"--token-auth-file={root / 'tokens.csv'}", "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={root / 'sa.pub'}",
            f"--service-account-signing-key-file={root / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24", "--disable-admission-plugins=ServiceAccount",
            "--watch-cache=false", "--allow-privileged=true",
        ],
        stdout=api_log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    api_log.close()
    cluster = Cluster(root=root, url=url, kubeconfig=root / "kubeconfig", etcd_url=etcd_url, processes=processes)
    cluster.kubeconfig.write_text(yaml.safe_dump(_kubeconfig(url, ADMIN_TOKEN, "admin")))
    try:
        _wait_ready(url, 60, processes["apiserver"], root / "kube-apiserver.log")
    except BaseException:
        cluster.stop()
        raise
    return cluster
