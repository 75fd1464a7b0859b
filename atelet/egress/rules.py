"""The nat rules that take a sandbox's outbound connections to the egress proxy, and the kernel's
guard that keeps the proxy off the node itself.

``ATE-EGRESS-<tag>`` (nat, from PREROUTING for packets of this node's veths, ``-i atv<tag>+``;
only the first packet of a connection passes nat):

1. the local endpoint's ``169.254.100.1:80`` is left to ``atelet.local_endpoint_rules``, and so
   is its port on the node's own addresses (``local_endpoint_port``: a worker may call its own
   gateway's port directly; the isolation chain admits it there only, from its own address);
2. with the proxy on, ``169.254.100.1:3128`` (``domain.local_endpoint.PROXY_PORT``, the actors'
   ``HTTP_PROXY``) is redirected to the explicit proxy port, and TCP to port 80 and 443 of any
   address to the intercepting ports, each at the gateway of the veth the packet came in on
   (``REDIRECT``), where Squid listens (``atelet.egress.squid_config``);
3. every other TCP connection and UDP datagram is redirected to port ``CLOSED_PORT`` of the
   gateway, where the isolation chain refuses it (``atelet.isolation``: a TCP reset, an ICMP
   port unreachable). Without this, one to an address beyond the node would be dropped by the
   routing (IP forwarding is off), and the sandbox would wait for its time-out.

The isolation chain lets through exactly the redirected connections to Squid's ports, from each
worker's own address (``ctstate DNAT``). IPv6 is not redirected: it stays closed.

``ATE-EGRESSOUT-<tag>`` (filter, from OUTPUT for packets of Squid's user): Squid's new TCP
connections to an address of this node (``addrtype LOCAL``: any address it has now) are
refused, but to loopback (Squid reaches its own ``external_acl_type`` helpers over TCP there;
the ``dst`` ACL keeps requests off it) and the operator's exceptions. The ``dst`` ACL of Squid
refuses names resolving into the protected networks first, with a page saying so; this guard
holds even for an address the node gets later.

Both are rebuilt atomically at each start (``iptables-restore --noflush``) with one jump each;
``remove`` undoes them.
"""

from __future__ import annotations

from collections.abc import Sequence

from atelet import netns, proc
from atelet.errors import internal
from domain.egress import IpNetwork
from domain.local_endpoint import ADDRESS, PORT, PROXY_PORT

CLOSED_PORT = 1
"""Where the connections no rule takes are redirected, to be refused (never opened)."""


def nat_chain(node: str) -> str:
    """The nat chain of ``node``'s redirects: ``ATE-EGRESS-<tag>``."""
    return f"ATE-EGRESS-{netns.node_tag(node)}"


def guard_chain(node: str) -> str:
    """The filter chain of the guard on Squid's own connections: ``ATE-EGRESSOUT-<tag>``."""
    return f"ATE-EGRESSOUT-{netns.node_tag(node)}"


def nat_rules(node: str, ports: tuple[int, int, int] | None, local_endpoint_port: int = 0) -> str:
    """The ``iptables-restore`` input of ``node``'s nat chain.

    Args:
        node: the node.
        ports: Squid's (explicit proxy, intercepted HTTP, intercepted TLS) ports, or None when
            the proxy is off (then every connection is refused).
        local_endpoint_port: the local endpoint's port on each gateway (0: not served).
    """
    name = nat_chain(node)
    rules = [f"-A {name} -d {ADDRESS}/32 -p tcp -m tcp --dport {PORT} -j RETURN"]
    if local_endpoint_port:
        rules.append(f"-A {name} -p tcp -m tcp --dport {local_endpoint_port} -m addrtype --dst-type LOCAL -j RETURN")
    if ports is not None:
        proxy, http, https = ports
        rules += [
            f"-A {name} -d {ADDRESS}/32 -p tcp -m tcp --dport {PROXY_PORT} -j REDIRECT --to-ports {proxy}",
            f"-A {name} -p tcp -m tcp --dport 80 -j REDIRECT --to-ports {http}",
            f"-A {name} -p tcp -m tcp --dport 443 -j REDIRECT --to-ports {https}",
        ]
    rules += [
        f"-A {name} -p tcp -j REDIRECT --to-ports {CLOSED_PORT}",
        f"-A {name} -p udp -j REDIRECT --to-ports {CLOSED_PORT}",
    ]
    return f"*nat\n:{name} - [0:0]\n" + "".join(r + "\n" for r in rules) + "COMMIT\n"


def guard_rules(node: str, exceptions: Sequence[IpNetwork] = (), ipv4: bool = True,
                protected: Sequence[IpNetwork] = ()) -> str:  # fmt: skip
    """The ``iptables-restore`` (``ipv4``) or ``ip6tables-restore`` input of the guard chain: Squid's
    new TCP connections to loopback and the ``exceptions`` pass; to ``protected`` networks (those
    its ``dst`` ACL refuses: a backstop should a resolved address change between the ACL and the
    connect) and to any address of the node, a reset."""
    name = guard_chain(node)
    version = 4 if ipv4 else 6
    loopback = "127.0.0.0/8" if ipv4 else "::1/128"  # Squid talks to its own helpers there
    passed = "".join(f"-A {name} -d {n} -j RETURN\n" for n in [loopback, *(str(e) for e in exceptions
                                                                        if e.version == version)])  # fmt: skip
    refused = "".join(f"-A {name} -d {n} -p tcp -m conntrack --ctstate NEW -j REJECT --reject-with tcp-reset\n"
                      for n in protected if n.version == version)  # fmt: skip
    return (
        f"*filter\n:{name} - [0:0]\n{passed}{refused}"
        f"-A {name} -p tcp -m conntrack --ctstate NEW -m addrtype --dst-type LOCAL -j REJECT --reject-with tcp-reset\n"
        "COMMIT\n"
    )


def nat_jump(node: str) -> list[str]:
    """The PREROUTING rule sending packets from ``node``'s veths to its nat chain."""
    return ["-i", f"{netns.host_if_prefix(node)}+", "-j", nat_chain(node)]


def guard_jump(node: str, uid: int) -> list[str]:
    """The OUTPUT rule sending the packets of user ``uid`` (Squid's) to the guard chain."""
    return ["-m", "owner", "--uid-owner", str(uid), "-j", guard_chain(node)]


async def _must(args: list[str], stdin: bytes | None = None) -> None:
    done = await proc.run(args, timeout=20, stdin=stdin)
    if not done.ok:
        raise internal(f"egress: the rule failed (the atelet needs CAP_NET_ADMIN): {done.describe()}")


async def _jump_first(program: str, table: str, hook: str, jump: list[str]) -> None:
    if not (await proc.run([program, "-w", "5", "-t", table, "-C", hook, *jump], timeout=20)).ok:
        await _must([program, "-w", "5", "-t", table, "-I", hook, "1", *jump])


async def install_redirect(node: str, ports: tuple[int, int, int] | None, local_endpoint_port: int = 0) -> None:
    """Installs (or rebuilds) ``node``'s nat chain (``nat_rules``) and its jump; idempotent.

    Raises:
        AteletError: INTERNAL when iptables refuses.
    """
    await _must(["iptables-restore", "-w", "5", "--noflush"], nat_rules(node, ports, local_endpoint_port).encode())
    await _jump_first("iptables", "nat", "PREROUTING", nat_jump(node))


async def install_guard(node: str, uid: int, exceptions: Sequence[IpNetwork], families: Sequence[str],
                        protected: Sequence[IpNetwork] = ()) -> None:  # fmt: skip
    """Installs (or rebuilds) the guard on user ``uid``'s connections for each of ``families``
    (``iptables``, ``ip6tables``); idempotent.

    Raises:
        AteletError: INTERNAL when iptables refuses.
    """
    for program in families:
        rules = guard_rules(node, exceptions, ipv4=program == "iptables", protected=protected)
        await _must([f"{program}-restore", "-w", "5", "--noflush"], rules.encode())
        await _jump_first(program, "filter", "OUTPUT", guard_jump(node, uid))


async def _remove(program: str, table: str, hook: str, jump: list[str], chain: str) -> None:
    while (await proc.run([program, "-w", "5", "-t", table, "-D", hook, *jump], timeout=20)).ok:
        pass
    await proc.run([program, "-w", "5", "-t", table, "-F", chain], timeout=20)
    await proc.run([program, "-w", "5", "-t", table, "-X", chain], timeout=20)


async def remove_redirect(node: str) -> None:
    """Removes ``node``'s nat chain and jump (no error when gone)."""
    await _remove("iptables", "nat", "PREROUTING", nat_jump(node), nat_chain(node))


async def remove_guard(node: str, uid: int, families: Sequence[str]) -> None:
    """Removes the guard chain and jump (no error when gone)."""
    for program in families:
        await _remove(program, "filter", "OUTPUT", guard_jump(node, uid), guard_chain(node))


def drain_comment(node: str) -> str:
    """The comment that marks ``node``'s drain rules (``block_new``)."""
    return f"ate-egress-drain-{netns.node_tag(node)}"


def drain_rule(node: str, address: str, ports: Sequence[int]) -> list[str]:
    """The INPUT rule refusing new connections from ``address`` to Squid's ``ports`` (as the nat
    redirect leaves them) while its sandbox is checkpointed."""
    return ["-s", f"{address}/32", "-p", "tcp", "-m", "multiport", "--dports", ",".join(map(str, sorted(set(ports)))),
            "-m", "conntrack", "--ctstate", "NEW", "-m", "comment", "--comment", drain_comment(node),
            "-j", "REJECT", "--reject-with", "tcp-reset"]  # fmt: skip


async def block_new(node: str, address: str, ports: Sequence[int]) -> None:
    """Refuses the new connections of ``address`` to Squid (``drain_rule``, first in INPUT) until
    ``unblock_new``: a checkpoint's drain must not see a connection opened after it.

    Raises:
        AteletError: INTERNAL when iptables refuses.
    """
    await _must(["iptables", "-w", "5", "-I", "INPUT", "1", *drain_rule(node, address, ports)])


async def unblock_new(node: str, address: str, ports: Sequence[int]) -> None:
    """Removes ``block_new``'s rule (every copy; none is fine)."""
    while (await proc.run(["iptables", "-w", "5", "-D", "INPUT", *drain_rule(node, address, ports)], timeout=20)).ok:
        pass


async def remove_drain_rules(node: str) -> None:
    """Removes every drain rule of ``node`` (those a previous atelet left, stopped mid-checkpoint)."""
    listed = await proc.run(["iptables", "-w", "5", "-S", "INPUT"], timeout=20)
    for line in listed.stdout.splitlines() if listed.ok else []:
        if f"--comment {drain_comment(node)}" in line and line.startswith("-A INPUT "):
            await proc.run(["iptables", "-w", "5", "-D", "INPUT", *line.split()[2:]], timeout=20)
