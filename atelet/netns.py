"""One network namespace per worker, joined to the host by a veth pair on its own /30.

Worker ``i`` of a node gets the i-th /30 of the node's subnet: the host end of the veth holds
``base+4i+1``, the worker end (inside namespace ``ate-<node>-<worker>``) ``base+4i+2`` and a
default route via the host end. runsc takes the worker end over and strips its address and
routes, and does not give them back when the sandbox exits: call ``ensure`` before every
run and restore. A sandbox adopted from a previous atelet run keeps its namespace untouched:
``attach`` only checks it and re-applies the host end's address (``create`` would destroy it). Interface names must fit IFNAMSIZ (15 chars): ``atv<h><i>`` (host end) and
``atp<h><i>`` (worker end), where ``h`` is 4 hex digits of a hash of the node name (so two
atelets on one machine do not collide) and ``i`` the worker index.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from atelet import proc
from atelet.errors import internal

log = logging.getLogger(__name__)

NETNS_DIR = Path("/var/run/netns")


@dataclass(frozen=True)
class WorkerNet:
    """Names and addresses of one worker's network namespace (IPs as dotted strings)."""

    netns: str
    host_if: str
    peer_if: str
    host_ip: str
    worker_ip: str
    prefixlen: int = 30

    @property
    def netns_path(self) -> str:
        """Path runsc's OCI config uses for the namespace."""
        return str(NETNS_DIR / self.netns)


def node_tag(node: str) -> str:
    """The 4 hex digits of sha256(``node``) in the names of the node's veths (``atv<tag><i>``)."""
    return hashlib.sha256(node.encode()).hexdigest()[:4]


def host_if_prefix(node: str) -> str:
    """The start of the name of every host end of ``node``'s veths (``atv<tag>``)."""
    return f"atv{node_tag(node)}"


def plan(node: str, worker: str, index: int, subnet: str) -> WorkerNet:
    """Computes the names and the /30 of worker ``index``; raises ValueError if the subnet is full."""
    net = ipaddress.IPv4Network(subnet, strict=False)
    if (index + 1) * 4 > net.num_addresses:
        raise ValueError(f"subnet {subnet} has no /30 left for worker index {index}")
    base = int(net.network_address) + 4 * index
    tag = node_tag(node)
    safe = re.sub(r"[^A-Za-z0-9_.-]", "-", f"ate-{node}-{worker}")[:200]
    return WorkerNet(
        netns=safe,
        host_if=f"atv{tag}{index}",
        peer_if=f"atp{tag}{index}",
        host_ip=str(ipaddress.IPv4Address(base + 1)),
        worker_ip=str(ipaddress.IPv4Address(base + 2)),
    )


async def _ip(*args: str, check: bool = True) -> proc.Result:
    result = await proc.run(["ip", *args], timeout=20)
    if check and not result.ok:
        raise internal(f"network setup failed: {result.describe()}")
    return result


async def exists(net: WorkerNet) -> bool:
    """True when the namespace is mounted."""
    return (NETNS_DIR / net.netns).exists()


async def destroy(net: WorkerNet) -> None:
    """Deletes the namespace and the host end of the veth; no error when they are gone already."""
    if await exists(net):
        await _ip("netns", "delete", net.netns, check=False)
    await _ip("link", "delete", net.host_if, check=False)


async def create(net: WorkerNet) -> None:
    """Creates the namespace and veth pair from scratch, removing leftovers of a crashed run first."""
    await destroy(net)
    await _ip("netns", "add", net.netns)
    await _ip("link", "add", net.host_if, "type", "veth", "peer", "name", net.peer_if)
    await _ip("link", "set", net.peer_if, "netns", net.netns)
    await ensure(net)
    log.info("worker network %s: %s (host %s via %s)", net.netns, net.worker_ip, net.host_ip, net.host_if)


async def ensure(net: WorkerNet) -> None:
    """(Re)applies addresses, link state and the default route; cheap (two ``ip -batch``) and idempotent."""
    cidr = f"/{net.prefixlen}"
    host = f"addr replace {net.host_ip}{cidr} dev {net.host_if}\nlink set {net.host_if} up\n"
    inner = (
        f"addr replace {net.worker_ip}{cidr} dev {net.peer_if}\n"
        f"link set {net.peer_if} up\nlink set lo up\n"
        f"route replace default via {net.host_ip}\n"
    )
    for args, script in ((["ip", "-batch", "-"], host), (["ip", "-n", net.netns, "-batch", "-"], inner)):
        result = await proc.run(args, timeout=20, stdin=script.encode())
        if not result.ok:
            raise internal(f"network setup of {net.netns} failed: {result.describe()}")


async def attach(net: WorkerNet, sandbox_pid: int = 0) -> None:
    """For a running sandbox adopted from a previous atelet run: checks that its namespace and the
    host end of the veth still exist (and, given ``sandbox_pid``, that the sandbox is in that very
    namespace), then re-applies only the host end's address and link state. Nothing inside the
    namespace is touched: the sandbox owns the worker end. INTERNAL when the network is not usable."""
    path = NETNS_DIR / net.netns
    if not path.exists():
        raise internal(f"network namespace {net.netns} is gone")
    if sandbox_pid > 0:
        try:
            mine = Path(f"/proc/{sandbox_pid}/ns/net").stat()
        except OSError:
            mine = None  # cannot tell (the process may be going away): the exit watch will see
        if mine is not None:
            named = path.stat()
            if (mine.st_dev, mine.st_ino) != (named.st_dev, named.st_ino):
                raise internal(f"sandbox process {sandbox_pid} is not in network namespace {net.netns}")
    if not (await _ip("link", "show", "dev", net.host_if, check=False)).ok:
        raise internal(f"host end {net.host_if} of worker network {net.netns} is gone")
    script = f"addr replace {net.host_ip}/{net.prefixlen} dev {net.host_if}\nlink set {net.host_if} up\n"
    result = await proc.run(["ip", "-batch", "-"], timeout=20, stdin=script.encode())
    if not result.ok:
        raise internal(f"network setup of {net.netns} failed: {result.describe()}")
    log.info("worker network %s adopted: %s (host %s via %s)", net.netns, net.worker_ip, net.host_ip, net.host_if)
