"""The atelet as it runs in a worker pod (controller/deployments.py), with real runsc: inside a
network namespace standing for the pod, one worker from a pool document, its address the pod IP,
every TCP port but the atelet's own forwarded into the worker's namespace. From outside the
"pod", the counter answers at the pod IP, before and after a checkpoint and restore."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from atelet.proto import atelet_pb2 as pb
from atelet.proto import atelet_pb2_grpc as pb_grpc
from tests.atelet.conftest import REPO, control_plane_tls, counter_spec, runsc_missing, tls_flags
from tests.atelet.fake_api import FakeApi, fake_api

pytestmark = [pytest.mark.runsc, pytest.mark.asyncio]
ACTOR = pb.ActorRef(atespace="demo", name="c1")


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=check)


@dataclass
class Pod:
    """A network namespace joined to the host by a veth, as a pod is to its node."""

    netns: str
    host_if: str
    host_ip: str
    pod_ip: str


@pytest.fixture
def pod() -> Iterator[Pod]:
    tag = uuid.uuid4().hex[:6]
    octet = random.randrange(1, 250)
    made = Pod(netns=f"atepod-{tag}", host_if=f"apdh{tag}", host_ip=f"10.252.{octet}.1", pod_ip=f"10.252.{octet}.2")
    sh("ip", "netns", "add", made.netns)
    sh("ip", "link", "add", made.host_if, "type", "veth", "peer", "name", f"apdp{tag}")
    sh("ip", "link", "set", f"apdp{tag}", "netns", made.netns)
    sh("ip", "addr", "add", f"{made.host_ip}/30", "dev", made.host_if)
    sh("ip", "link", "set", made.host_if, "up")
    for command in (f"addr add {made.pod_ip}/30 dev apdp{tag}", f"link set apdp{tag} up", "link set lo up",
                    f"route add default via {made.host_ip}"):  # fmt: skip
        sh("ip", "-n", made.netns, *command.split())
    try:
        yield made
    finally:
        sh("ip", "netns", "delete", made.netns, check=False)
        sh("ip", "link", "delete", made.host_if, check=False)


def pool_document() -> str:
    return json.dumps({
        "apiVersion": "ate.dev/v1alpha1", "kind": "WorkerPool", "metadata": {"name": "pods", "labels": {"zone": "a"}},
        "spec": {"replicas": 1, "sandboxClass": "gvisor", "capacity": {"cpu": "1", "memory": "1Gi"}},
    })  # fmt: skip


@contextmanager
def pod_atelet(pod: Pod, base: Path, *extra: str, node: str = "") -> Iterator[subprocess.Popen[bytes]]:
    """The atelet of a worker pod, run inside ``pod``'s namespace (listening on 0.0.0.0:8085, metrics
    on 0.0.0.0:9085, one worker forwarded at the pod IP) as node ``node`` (default: a fresh name),
    ready; ``extra`` flags are appended. It is stopped with SIGTERM on exit (the caller checks its
    return code); its log is ``base/atelet.log``."""
    reason = runsc_missing()
    if reason:
        pytest.fail(reason)
    node = node or f"pod-{uuid.uuid4().hex[:6]}"
    log = base / "atelet.log"
    argv = [
        # nsenter, not `ip netns exec`: that one remounts /sys, hiding the cgroups runsc needs
        "nsenter", f"--net=/var/run/netns/{pod.netns}", sys.executable, "-m", "atelet", "--node", node,
        "--listen", "0.0.0.0:8085", "--advertise-address", f"{pod.pod_ip}:8085",
        "--advertise-worker-ip", pod.pod_ip, "--pool-document", pool_document(),
        "--state-dir", str(base / "state"), "--snapshot-root", str(base / "snapshots"),
        "--image-root", str(REPO), "--subnet", f"10.253.{random.randrange(250)}.0/29",
        "--metrics-listen", "0.0.0.0:9085", *tls_flags(node), *extra,
    ]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))
    try:
        deadline = time.monotonic() + 60
        while "atelet: ready on" not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield process
    finally:
        process.terminate()
        process.wait(60)


async def test_a_worker_pod_serves_its_actor_at_the_pod_ip(pod: Pod, short_tmp: Path, counter_image: str) -> None:
    with fake_api(host=pod.host_ip) as api:
        node = f"pod-{uuid.uuid4().hex[:6]}"
        with pod_atelet(pod, short_tmp, "--api-server", api.url, "--heartbeat-seconds", "0.2", node=node) as process:
            await _serve_and_move(api, pod, node, counter_image, short_tmp)
        assert process.returncode == 0, (short_tmp / "atelet.log").read_text()
        rules = sh("ip", "netns", "exec", pod.netns, "iptables", "-t", "nat", "-S", check=False).stdout
        assert "ATE-FORWARD" not in rules  # a stopped atelet leaves no forwarding behind


async def _serve_and_move(api: FakeApi, pod: Pod, node: str, image: str, base: Path) -> None:
    deadline = time.monotonic() + 10
    while not api.of("PUT", "") and time.monotonic() < deadline:
        time.sleep(0.05)
    [worker] = api.of("PUT", "")[-1].body["workers"]
    assert (worker["name"], worker["pool"], worker["ip"], worker["labels"]) == ("pods-0", "pods", pod.pod_ip, {"zone": "a"})
    async with control_plane_tls().channel(f"{pod.pod_ip}:8085", node) as channel:  # the atelet, at the pod IP
        stub = pb_grpc.AteletStub(channel)  # type: ignore[no-untyped-call]
        run = await stub.Run(pb.RunRequest(operation_id="o-run", worker="pods-0", actor=ACTOR, spec=counter_spec(image),
                                           probe_timeout_seconds=30))  # fmt: skip
        assert run.worker_ip != pod.pod_ip  # the sandbox has its own address inside the pod
        assert await _get(pod.pod_ip) == {"memory_count": 1, "file_count": 1}  # ...reached at the pod IP
        assert await _get(pod.pod_ip) == {"memory_count": 2, "file_count": 2}
        uri = f"file://{(base / 'snapshots').resolve()}/demo/c1/1"
        done = await stub.Checkpoint(pb.CheckpointRequest(operation_id="o-ckpt", worker="pods-0", actor=ACTOR,
                                                          scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri))  # fmt: skip
        await stub.Restore(pb.RestoreRequest(operation_id="o-restore", worker="pods-0", actor=ACTOR,
                                             spec=counter_spec(image), snapshot_uri=uri, manifest=done.manifest,
                                             probe_timeout_seconds=30))  # fmt: skip
        assert await _get(pod.pod_ip) == {"memory_count": 3, "file_count": 3}  # memory kept, still at the pod IP
        await stub.Terminate(pb.TerminateRequest(operation_id="o-term", worker="pods-0", actor=ACTOR))


async def _get(ip: str) -> dict[str, int]:
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(f"http://{ip}:8080/", headers={"Connection": "close"})
        response.raise_for_status()
        return {k: v for k, v in response.json().items() if k != "ip"}
