"""Fixtures for the atelet tests: a real atelet (in-process gRPC server) and the counter image.

Every test atelet serves mutual TLS with a certificate of its node from one CA per test session
(`certificates`); the stubs of `running_atelet` call it as the control plane does.
Tests marked ``runsc`` need root, runsc, ip and umoci, and build examples/counter (needs go).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shlex
import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import pytest_asyncio

from atelet import isolation
from atelet.egress import rules
from atelet.egress.squid import squid_ids
from atelet.errors import AteletError
from atelet.main import serve
from atelet.proto import atelet_pb2 as pb
from atelet.proto import atelet_pb2_grpc as pb_grpc
from atelet.settings import AteletSettings
from tests.tls import certificates, control_plane_tls, tls_flags

__all__ = ["certificates", "control_plane_tls", "tls_flags"]  # the atelet tests import them from here

REPO = Path(__file__).resolve().parents[2]
COUNTER_IMAGE = "oci:examples/counter/oci:latest"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "runsc: needs root, runsc (gVisor), iproute2 and umoci")


def runsc_missing() -> str | None:
    """Why runsc tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("runsc", "ip", "umoci", "unshare"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build_counter_image() -> str:
    """Builds examples/counter (idempotent) and returns its image reference."""
    if shutil.which("go") is None and not (REPO / "examples/counter/oci/index.json").exists():
        pytest.skip("needs go to build examples/counter")
    subprocess.run([str(REPO / "examples/counter/build.sh")], check=True, capture_output=True)
    return COUNTER_IMAGE


@pytest.fixture(scope="session")
def counter_image() -> str:
    """Builds examples/counter (idempotent) and returns its image reference."""
    return build_counter_image()


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short temp dir (runsc's socket paths must stay short), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="ate-t-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def make_settings(base: Path, **overrides: object) -> AteletSettings:
    """Settings for a test atelet rooted at ``base`` with a unique node name and subnet."""
    tag = f"{os.getpid() % 10000}{random.randrange(1000):03d}"
    values: dict[str, object] = {
        "node": f"t{tag}",
        "listen": f"127.0.0.1:{free_port()}",
        "metrics_listen": "",
        "state_dir": base / "state",
        "snapshot_roots": [base / "snapshots"],
        "image_roots": [REPO],
        "workers": 2,
        "subnet": f"10.{random.randrange(160, 250)}.{random.randrange(256)}.0/24",
    }
    values.update(overrides)
    node = str(values["node"])
    files = certificates(node).node(node)
    values = {"tls_cert": files.cert, "tls_key": files.key, "tls_ca": files.ca} | values
    return AteletSettings(**values)  # type: ignore[arg-type]


@dataclass
class Atelet:
    """A running test atelet: its settings and a connected stub."""

    settings: AteletSettings
    stub: pb_grpc.AteletStub
    channel: grpc.aio.Channel

    @property
    def snapshot_root(self) -> Path:
        return Path(self.settings.snapshot_roots[0]).resolve()


@contextlib.asynccontextmanager
async def running_atelet(settings: AteletSettings) -> AsyncIterator[Atelet]:
    """Serves an atelet in this event loop; always stops it (which must leave nothing behind)."""
    ready = asyncio.Event()
    task = asyncio.create_task(serve(settings, ready))
    channel = None
    try:
        done, _ = await asyncio.wait({task, asyncio.create_task(ready.wait())},
                                     timeout=30, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()  # raises the startup error
        assert ready.is_set(), "atelet did not become ready"
        channel = control_plane_tls().channel(settings.listen, settings.node)
        yield Atelet(settings, pb_grpc.AteletStub(channel), channel)
    finally:
        if channel is not None:
            await channel.close()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest_asyncio.fixture
async def atelet(short_tmp: Path) -> AsyncIterator[Atelet]:
    """A real atelet with 2 workers (runsc tests only)."""
    reason = runsc_missing()
    if reason:
        pytest.skip(reason)
    settings = make_settings(short_tmp)
    try:
        async with running_atelet(settings) as a:
            yield a
        assert_nothing_left(settings)
    finally:
        force_cleanup(settings)


def force_cleanup(settings: AteletSettings) -> None:
    """Removes whatever a failed test left: sandboxes under the runsc root, the node's namespaces,
    its isolation rules and its egress rules (a guard left on Squid's user would refuse the
    connections of every later node's Squid to what only that node's exceptions allowed)."""
    root = Path(settings.state_dir).resolve() / "runsc"
    if root.exists():
        listed = subprocess.run(["runsc", f"--root={root}", "list", "-quiet"], capture_output=True, text=True)
        for cid in listed.stdout.split():
            subprocess.run(["runsc", f"--root={root}", "delete", "--force", cid], capture_output=True)
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in namespaces.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(f"ate-{settings.node}-"):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)
    chain = isolation.chain(settings.node)
    for program in ("iptables", "ip6tables"):
        for hook in isolation.HOOKS:
            rule = [hook, *isolation.jump(settings.node)]
            while subprocess.run([program, "-w", "5", "-D", *rule], capture_output=True).returncode == 0:
                pass
        subprocess.run([program, "-w", "5", "-F", chain], capture_output=True)
        subprocess.run([program, "-w", "5", "-X", chain], capture_output=True)
    _remove_egress_rules(settings.node)


def _remove_egress_rules(node: str) -> None:
    """The node's egress guard (filter OUTPUT), redirect (nat PREROUTING) and drain rules (INPUT)."""
    try:
        uid, _ = squid_ids()
    except AteletError:  # no Squid user: no guard was ever installed
        uid = None
    removals = [("iptables", "nat", "PREROUTING", rules.nat_jump(node), rules.nat_chain(node))]
    if uid is not None:
        removals += [(p, "filter", "OUTPUT", rules.guard_jump(node, uid), rules.guard_chain(node))
                     for p in ("iptables", "ip6tables")]  # fmt: skip
    for program, table, hook, jump, chain in removals:
        while subprocess.run([program, "-w", "5", "-t", table, "-D", hook, *jump], capture_output=True).returncode == 0:
            pass
        subprocess.run([program, "-w", "5", "-t", table, "-F", chain], capture_output=True)
        subprocess.run([program, "-w", "5", "-t", table, "-X", chain], capture_output=True)
    listed = subprocess.run(["iptables", "-w", "5", "-S", "INPUT"], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        if rules.drain_comment(node) in line and line.startswith("-A "):
            subprocess.run(["iptables", "-w", "5", "-D", *shlex.split(line)[1:]], capture_output=True)


def isolation_rules(node: str, netns: str | None = None) -> list[str]:
    """Every filter rule (``iptables -S`` / ``ip6tables -S`` lines) naming ``node``'s isolation
    chain, in the namespace ``netns`` (None: this process's)."""
    chain = isolation.chain(node)
    found = []
    for program in ("iptables", "ip6tables"):
        argv = [program, "-w", "5", "-S"]
        if netns is not None:
            argv = ["ip", "netns", "exec", netns, *argv]
        listed = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        found += [f"{program} {line}" for line in listed.splitlines() if chain in line]
    return found


def assert_nothing_left(settings: AteletSettings) -> None:
    """No sandbox under the atelet's runsc root and none of its namespaces or isolation rules remain."""
    root = Path(settings.state_dir).resolve() / "runsc"
    listed = subprocess.run(["runsc", f"--root={root}", "list", "-quiet"], capture_output=True, text=True)
    assert listed.stdout.strip() == "", f"sandboxes left: {listed.stdout}"
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"ate-{settings.node}-" not in namespaces, f"namespaces left: {namespaces}"
    assert isolation_rules(settings.node) == [], "isolation rules left"


def checkpoint_compression(state_file: bytes) -> str:
    """The ``compression`` runsc wrote into a checkpoint's state file (``checkpoint.img``: the
    magic ``gVisorSF``, then its metadata as JSON)."""
    assert state_file.startswith(b"gVisorSF")
    start = state_file.index(b"{")
    metadata, _ = json.JSONDecoder().raw_decode(state_file[start : start + 4096].decode("utf-8", "replace"))
    return str(metadata["compression"])


def counter_spec(image: str = COUNTER_IMAGE) -> pb.WorkloadSpec:
    """The WorkloadSpec of examples/counter/template.yaml."""
    return pb.WorkloadSpec(
        containers=[pb.Container(
            name="counter", image=image, command=["/counter"],
            env={"DATA_DIR": "/data", "PORT": "8080"},
            wakeup_probe=pb.HttpGetProbe(path="/readyz", port=8080),
            volume_mounts=[pb.VolumeMount(name="data", mount_path="/data")],
        )],
        volumes=[pb.Volume(name="data", durable_dir=True)],
        cpu_millis=500, memory_bytes=256 * 2**20,
    )


def _cpu_cgroup_files(pid: int) -> tuple[Path, Path] | Path:
    """The CPU limit's files of process `pid`: (cfs_quota_us, cfs_period_us) on cgroup v1, or
    cpu.max on v2, from /proc/<pid>/cgroup."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            directory = Path("/sys/fs/cgroup") / controllers / path.lstrip("/")
            return directory / "cpu.cfs_quota_us", directory / "cpu.cfs_period_us"
        if controllers == "":
            return Path("/sys/fs/cgroup") / path.lstrip("/") / "cpu.max"
    raise AssertionError(f"no CPU cgroup for pid {pid}")


def cpu_limit_of_pid(pid: int) -> tuple[int, int]:
    """(quota, period) in µs of the CPU cgroup of process `pid`; quota -1: no limit."""
    files = _cpu_cgroup_files(pid)
    if isinstance(files, tuple):
        return int(files[0].read_text()), int(files[1].read_text())
    quota, period = files.read_text().split()
    return (-1 if quota == "max" else int(quota)), int(period)


def lift_cpu_limit_of_pid(pid: int) -> None:
    """Remove the CPU limit of process `pid`'s cgroup (as if it was never written)."""
    files = _cpu_cgroup_files(pid)
    if isinstance(files, tuple):
        files[0].write_text("-1")
    else:
        files.write_text("max")
