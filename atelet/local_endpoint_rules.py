"""The nat rule that takes a sandbox's calls to ``169.254.100.1:80`` to its node's local endpoint.

A packet from one of this node's veths (``-i atv<tag>+``) to the local endpoint's address and
port (``domain.local_endpoint``) is redirected (nat PREROUTING, ``REDIRECT``) to the endpoint's
port at the primary address of the veth it came in on: that worker's own gateway, where
``atelet.local_endpoint`` listens. The answers go back through conntrack as if from
``169.254.100.1``. The filter side (which connections pass at all) is ``atelet.isolation``'s.

The rules live in a chain of the node's own, ``ATE-LOCAL-<tag>``, rebuilt atomically at each start
(``iptables-restore --noflush``), with one jump to it from PREROUTING; ``remove`` undoes both.
"""

from __future__ import annotations

from atelet import netns, proc
from atelet.errors import internal
from domain.local_endpoint import ADDRESS, PORT


def chain(node: str) -> str:
    """The nat chain of ``node``'s redirect: ``ATE-LOCAL-<tag>``."""
    return f"ATE-LOCAL-{netns.node_tag(node)}"


def chain_rules(node: str, port: int) -> str:
    """The ``iptables-restore`` input that (re)defines ``node``'s nat chain."""
    name = chain(node)
    return (
        f"*nat\n:{name} - [0:0]\n"
        f"-A {name} -d {ADDRESS}/32 -p tcp -m tcp --dport {PORT} -j REDIRECT --to-ports {port}\n"
        "COMMIT\n"
    )


def jump(node: str) -> list[str]:
    """The PREROUTING rule sending packets from ``node``'s veths to its nat chain."""
    return ["-i", f"{netns.host_if_prefix(node)}+", "-j", chain(node)]


async def install(node: str, port: int) -> None:
    """Installs (or rebuilds) the redirect of ``node``'s sandboxes to ``port``; idempotent.

    Raises:
        AteletError: INTERNAL when iptables refuses (no CAP_NET_ADMIN, no nat table).
    """
    restored = await proc.run(["iptables-restore", "-w", "5", "--noflush"], stdin=chain_rules(node, port).encode())
    if not restored.ok:
        raise internal(f"local endpoint: the nat rule failed (the atelet needs CAP_NET_ADMIN): {restored.describe()}")
    if not (await proc.run(["iptables", "-w", "5", "-t", "nat", "-C", "PREROUTING", *jump(node)])).ok:
        added = await proc.run(["iptables", "-w", "5", "-t", "nat", "-I", "PREROUTING", "1", *jump(node)])
        if not added.ok:
            raise internal(f"local endpoint: the nat rule failed: {added.describe()}")


async def remove(node: str) -> None:
    """Removes ``node``'s redirect (no error when it is gone)."""
    while (await proc.run(["iptables", "-w", "5", "-t", "nat", "-D", "PREROUTING", *jump(node)])).ok:
        pass
    await proc.run(["iptables", "-w", "5", "-t", "nat", "-F", chain(node)])
    await proc.run(["iptables", "-w", "5", "-t", "nat", "-X", chain(node)])
