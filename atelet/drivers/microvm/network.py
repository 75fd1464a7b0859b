"""The microvm guest's network: the worker's address, owned by the guest.

The worker's network namespace is the one every class gets (atelet.netns: a veth pair on its
own /30, the worker end inside). For a VM the worker end carries no address: it is bridged
(``atb0``) with a tap device (``atm0``) that QEMU's virtio-net card uses, and the guest's init
puts the worker's address and default route on its ``eth0`` (kernel command line ``ate.ip``,
``ate.gw``). The host reaches the worker's IP exactly as for gVisor. The card's MAC address is
derived from the worker's IP at boot; a restored VM keeps the one its device state holds and,
on another worker, is told that worker's address (``Vm.readdress``). So the MAC behind a
worker's IP changes from one VM to the next: before each VM starts, the host forgets the one it
learnt (``forget_guest_mac``), or it would send to the last VM's card until its neighbour entry
went stale (about 30 s, in which the new guest gets no packet).
"""

from __future__ import annotations

import ipaddress
import logging

from atelet import proc
from atelet.errors import internal
from atelet.netns import WorkerNet

log = logging.getLogger(__name__)

BRIDGE = "atb0"
TAP = "atm0"


def mac_for(net: WorkerNet) -> str:
    """The guest card's MAC: locally administered, the worker IP's four bytes (e.g.
    ``52:54:0a:59:00:02`` for 10.89.0.2)."""
    a, b, c, d = ipaddress.IPv4Address(net.worker_ip).packed
    return f"52:54:{a:02x}:{b:02x}:{c:02x}:{d:02x}"


def guest_cmdline(net: WorkerNet) -> str:
    """The kernel command line words that give the guest its address and default route."""
    return f"ate.ip={net.worker_ip}/{net.prefixlen} ate.gw={net.host_ip}"


async def bridge_tap(net: WorkerNet) -> str:
    """In the worker's namespace (which must exist): move the worker end's address off, and
    bridge it with a tap device for QEMU; idempotent. Returns the tap's name.

    Raises:
        AteletError: INTERNAL when ``ip`` refuses (its message included).
    """
    script = (
        f"addr flush dev {net.peer_if}\n"
        f"link add {BRIDGE} type bridge\n"
        f"tuntap add dev {TAP} mode tap\n"
    )
    # add fails when it exists: run them one by one, tolerating "File exists"
    for line in script.strip().splitlines():
        result = await proc.run(["ip", "-n", net.netns, *line.split()], timeout=20)
        said = (result.stderr or "").lower()
        if not result.ok and "exists" not in said and "busy" not in said:  # already there (held by a VM)
            raise internal(f"microvm network of {net.netns}: ip {line}: {result.describe()}")
    rest = (
        f"link set {net.peer_if} master {BRIDGE}\nlink set {TAP} master {BRIDGE}\n"
        f"link set {net.peer_if} up\nlink set {TAP} up\nlink set {BRIDGE} up\nlink set lo up\n"
    )
    result = await proc.run(["ip", "-n", net.netns, "-batch", "-"], timeout=20, stdin=rest.encode())
    if not result.ok:
        raise internal(f"microvm network of {net.netns} failed: {result.describe()}")
    return TAP


async def forget_guest_mac(net: WorkerNet) -> None:
    """Drop the host's neighbour entry of the worker's IP (on the host end of its veth), so that
    the host asks again which card has it: the VM about to start may have another MAC than the
    last one (a fresh boot has the worker's own; a restored VM keeps its snapshot's). A failure
    is only logged: the entry then goes stale on its own.
    """
    result = await proc.run(["ip", "neigh", "flush", "to", net.worker_ip, "dev", net.host_if], timeout=20)
    if not result.ok:
        log.warning("microvm network of %s: the host's neighbour entry of %s stays: %s", net.netns, net.worker_ip,
                    result.describe())  # fmt: skip
