"""Actors cannot reach the control plane (issue 11): from inside a real gVisor sandbox, a TCP
connect to the atelet's gRPC port and to stand-ins for the API, Temporal and PostgreSQL, each
listening on every address of the host, fails on every address the sandbox can see: its gateway,
every address of the host (``ip -o addr``: loopback, the host's own, this node's other worker's
gateway, IPv6 link-local), 127.0.0.1 and ::1, and the other worker's sandbox (whose counter listens
on 8080). The host still reaches both sandboxes' actor port, and every listener answers the host
on every one of those addresses, so "closed" is the rules' doing, not an empty port.

The stand-ins listen on free ports rather than 8080/7233/5432: the rules (``atelet.isolation``)
look at the interface a packet comes from and its connection state, never at ports, and a fixed
port could collide with another stack on this machine. Egress to the outside world is not tested:
it does not exist (no NAT, IP forwarding off), before or after the rules.

The same holds in a worker pod (``test_a_sandbox_in_a_worker_pod_reaches_nothing_of_its_pod``),
where the atelet listens on 0.0.0.0 of the pod's namespace and forwards the pod IP into the
sandbox's."""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from atelet import netns
from atelet.proto import atelet_pb2 as pb
from atelet.proto import atelet_pb2_grpc as pb_grpc
from tests.atelet.conftest import (
    REPO,
    control_plane_tls,
    counter_spec,
    force_cleanup,
    free_port,
    isolation_rules,
    make_settings,
    running_atelet,
    runsc_missing,
)
from tests.atelet.prober import Listeners, build_busybox_image, parse_report, prober_spec
from tests.atelet.test_worker_pod import Pod, pod, pod_atelet

pytestmark = [pytest.mark.runsc, pytest.mark.asyncio]
__all__ = ["pod"]  # the fixture, imported for the pod test

PROBER = pb.ActorRef(atespace="demo", name="prober")
OTHER = pb.ActorRef(atespace="demo", name="other")


def op() -> str:
    return f"op-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def busybox_image(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(image root, image reference) of the prober's busybox image."""
    root = tmp_path_factory.mktemp("busybox")
    layout = build_busybox_image(root)
    return root, f"oci:{layout}:latest"


@pytest.fixture
def listeners() -> Iterator[Listeners]:
    made = Listeners()
    for part in ("api", "temporal", "postgresql"):
        made.open(part)
    try:
        yield made
    finally:
        made.close()


def addresses(netns: str | None = None) -> list[tuple[str, str]]:
    """(interface, address) of every address in ``netns`` (None: the host's), from ``ip -o addr``."""
    argv = ["ip", "-o", "addr"] if netns is None else ["ip", "-n", netns, "-o", "addr"]
    lines = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.splitlines()
    return [(line.split()[1], line.split()[3].split("/")[0]) for line in lines]


def connects_from_here(address: str, interface: str, port: int) -> bool:
    """Whether this process connects to ``address:port`` (link-local IPv6 through ``interface``)."""
    ip = ipaddress.ip_address(address)
    target = f"{address}%{interface}" if ip.version == 6 and ip.is_link_local else address
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    info = socket.getaddrinfo(target, port, family, socket.SOCK_STREAM)[0][4]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        try:
            s.connect(info)
        except OSError:
            return False
    return True


async def get(url: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(url, headers={"Connection": "close"})
    response.raise_for_status()
    return response


async def test_a_sandbox_reaches_no_port_of_the_host_nor_the_other_sandbox(
    short_tmp: Path, counter_image: str, busybox_image: tuple[Path, str], listeners: Listeners
) -> None:
    reason = runsc_missing()
    if reason:
        pytest.fail(reason)
    image_root, image = busybox_image
    # The atelet's own gRPC on every address, as in a worker pod (ate dev binds 127.0.0.1).
    settings = make_settings(short_tmp, listen=f"0.0.0.0:{free_port()}", image_roots=[REPO, image_root])
    grpc_port = int(settings.listen.rpartition(":")[2])
    subnet = ipaddress.ip_network(settings.subnet)
    gateway, other_gateway = str(subnet[1]), str(subnet[5])  # worker i's host end is the i-th /30's .1
    try:
        async with running_atelet(settings) as atelet:
            other = await atelet.stub.Run(pb.RunRequest(operation_id=op(), worker="default-1", actor=OTHER,
                                                        spec=counter_spec(counter_image), probe_timeout_seconds=30))  # fmt: skip
            # Every address of the host, but other nodes' veths (other tests' atelets come and go).
            mine = netns.host_if_prefix(settings.node)
            host = [(i, a) for i, a in addresses() if not i.startswith("atv") or i.startswith(mine)]
            assert {gateway, other_gateway, "127.0.0.1"} <= {a for _, a in host}, host
            targets = sorted({a for _, a in host} | {other.worker_ip})
            ports = sorted([grpc_port, 8080, *listeners.ports.values()])

            run = await atelet.stub.Run(pb.RunRequest(operation_id=op(), worker="default-0", actor=PROBER,
                                                      spec=prober_spec(image, targets, ports), probe_timeout_seconds=60))  # fmt: skip
            report = parse_report((await get(f"http://{run.worker_ip}:8080/report")).text)  # host -> actor port

            assert report.gateway == gateway
            assert set(report.outcomes) == {(a, p) for a in targets for p in ports}  # it tried them all...
            assert report.opened == [], f"the sandbox connected to {report.opened}"  # ...and none connected
            assert listeners.accepted == []  # nor did any listener see it

            # Positive controls: the host reaches the other actor's port and every listener on
            # every address the sandbox tried (so the listeners were there to be found).
            assert (await get(f"http://{other.worker_ip}:8080/")).json()["memory_count"] == 1
            unreachable = [(a, port) for i, a in host for port in listeners.ports.values()
                           if not connects_from_here(a, i, port)]  # fmt: skip
            assert unreachable == []

            # per family: 2 jumps, -N and 4 rules (replies pass; TCP reset, UDP unreachable, the rest dropped)
            assert len(isolation_rules(settings.node)) == 2 * (2 + 1 + 4)
            for actor, worker in ((PROBER, "default-0"), (OTHER, "default-1")):
                await atelet.stub.Terminate(pb.TerminateRequest(operation_id=op(), worker=worker, actor=actor))
        assert isolation_rules(settings.node) == []  # a clean stop removes them
    finally:
        force_cleanup(settings)


async def test_a_sandbox_in_a_worker_pod_reaches_nothing_of_its_pod(
    pod: Pod, short_tmp: Path, busybox_image: tuple[Path, str], listeners: Listeners
) -> None:
    image_root, image = busybox_image
    node = f"pod-{uuid.uuid4().hex[:6]}"
    with pod_atelet(pod, short_tmp, "--image-root", str(image_root), node=node) as process:
        # The pod's addresses (the pod IP, the worker's gateway...), the node's end of the pod's
        # link and the host's own addresses, on the atelet's gRPC and metrics ports and the listeners'.
        host = [a for i, a in addresses() if not i.startswith(("atv", "apdh"))]
        targets = sorted({a for _, a in addresses(pod.netns)} | {pod.host_ip, *host})
        ports = sorted([8085, 9085, *listeners.ports.values()])
        async with control_plane_tls().channel(f"{pod.pod_ip}:8085", node) as channel:
            stub = pb_grpc.AteletStub(channel)  # type: ignore[no-untyped-call]
            run = await stub.Run(pb.RunRequest(operation_id=op(), worker="pods-0", actor=PROBER,
                                               spec=prober_spec(image, targets, ports), probe_timeout_seconds=60))  # fmt: skip
            # From outside the pod, the actor port answers at the pod IP (forwarded into the sandbox).
            report = parse_report((await get(f"http://{pod.pod_ip}:8080/report")).text)
            assert run.worker_ip != pod.pod_ip
            assert ipaddress.ip_address(report.gateway) in ipaddress.ip_network(f"{run.worker_ip}/30", strict=False)
            assert set(report.outcomes) == {(a, p) for a in [*targets, report.gateway] for p in ports}
            assert report.opened == [], f"the sandbox connected to {report.opened}"
            assert listeners.accepted == []
            assert len(isolation_rules(node, pod.netns)) == 2 * (2 + 1 + 4)  # in the pod's namespace
            await stub.Terminate(pb.TerminateRequest(operation_id=op(), worker="pods-0", actor=PROBER))
    assert process.returncode == 0, (short_tmp / "atelet.log").read_text()
    assert isolation_rules(node, pod.netns) == []
