"""Actors cannot open connections out of their worker's network: filter rules on the veths.

A sandbox runs untrusted code; its only link is its worker's veth (``atelet.netns``), whose host
end lies in the atelet's own network namespace (the host under ``ate dev``, the worker pod in a
cluster). Without rules, anything listening there on a wildcard address (the atelet's gRPC, the
API, Temporal, PostgreSQL, sshd...) answers a sandbox that connects to its gateway, to any other
address of the host (another worker's gateway, the host's own addresses, IPv6 link-local), and,
where IP forwarding is on, packets of a sandbox are routed on to other sandboxes and beyond.

``install`` therefore sends every packet that arrives from one of this node's veths (``-i
atv<tag>+``, matching every worker of the node, present and future) through a chain of its own,
``ATE-ISOLATE-<tag>``, from INPUT (to the host itself) and from FORWARD (through the host), for
IPv4 and, when the kernel has it, IPv6. The chain lets through packets of connections the
host side opened (conntrack ESTABLISHED, RELATED: the replies to the router's proxying, the
wakeup probe, the forwarding of a worker pod's IP) and, given ``openings``, each worker's
connections to its own gateway's local-endpoint port from its own address (``Opening``,
``atelet.local_endpoint``) and to the egress proxy's ports there, only as redirected by the
nat rules (``dnat``: ``atelet.egress.rules``), and refuses everything else: TCP with a reset,
UDP with an ICMP port unreachable (so a refused attempt fails at once, not after a time-out),
the rest dropped. Packets towards a sandbox and the host's own traffic are not looked at. So the
sandbox opens no connection to the host (but its own local endpoint and egress proxy), to
another sandbox, or to anything else through the host: an actor's only way out is the egress
proxy, which applies its policy (nothing NATs the workers' subnet, and IP forwarding is off on
a stock host).

The chain is rebuilt atomically at each start (``iptables-restore --noflush``) and the jumps to
it are inserted first in INPUT and FORWARD once, so a restart (or ``ate dev``'s restart of a
crashed atelet) leaves one copy. ``remove`` undoes it on a clean stop, once every sandbox is
gone; after a crash the rules stay, matching only the veths of the node, and keep adopted
sandboxes confined until the next start rebuilds them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from atelet import netns, proc
from atelet.errors import internal

log = logging.getLogger(__name__)

HOOKS = ("INPUT", "FORWARD")
IPV6 = Path("/proc/net/if_inet6")  # absent when the kernel has no IPv6


def chain(node: str) -> str:
    """The filter chain of ``node``'s rules: ``ATE-ISOLATE-<tag>`` (the tag of its veth names)."""
    return f"ATE-ISOLATE-{netns.node_tag(node)}"


def families() -> list[str]:
    """The iptables programs to drive: ``iptables`` and, when the kernel has IPv6, ``ip6tables``."""
    return ["iptables", "ip6tables"] if IPV6.exists() else ["iptables"]


@dataclass(frozen=True)
class Opening:
    """A connection a worker's sandbox may open to the host: from its veth ``host_if`` and its
    own address ``worker_ip`` to its gateway ``host_ip``, TCP port ``port`` (the node's local
    endpoint, ``atelet.local_endpoint``, or a port of the egress proxy); with ``dnat``, only when
    the nat table redirected it there (``atelet.egress.rules``). IPv4 only."""

    host_if: str
    worker_ip: str
    host_ip: str
    port: int
    dnat: bool = False


def chain_rules(node: str, openings: Sequence[Opening] = (), ipv4: bool = True) -> str:
    """The ``iptables-restore`` input that (re)defines ``node``'s chain with exactly its rules
    (the ``openings`` only in the IPv4 one)."""
    name = chain(node)
    opened = "".join(
        f"-A {name} -i {o.host_if} -s {o.worker_ip}/32 -d {o.host_ip}/32 -p tcp -m tcp --dport {o.port}"
        f"{' -m conntrack --ctstate DNAT' if o.dnat else ''} -j RETURN\n"
        for o in (openings if ipv4 else ())
    )
    unreachable = "icmp-port-unreachable" if ipv4 else "icmp6-port-unreachable"
    return (
        f"*filter\n:{name} - [0:0]\n"
        f"-A {name} -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN\n"
        f"{opened}"
        f"-A {name} -p tcp -j REJECT --reject-with tcp-reset\n"
        f"-A {name} -p udp -j REJECT --reject-with {unreachable}\n"
        f"-A {name} -j DROP\n"
        "COMMIT\n"
    )


def jump(node: str) -> list[str]:
    """The rule (without the chain it sits in) that sends packets from ``node``'s veths to its chain."""
    return ["-i", f"{netns.host_if_prefix(node)}+", "-j", chain(node)]


async def _run(args: list[str], *, stdin: bytes | None = None) -> proc.Result:
    try:
        return await proc.run(args, timeout=20, stdin=stdin)
    except FileNotFoundError:
        raise internal(
            f"worker network isolation: {args[0]} is not installed; the atelet needs the "
            "iptables package (iptables and ip6tables) to keep sandboxes off the host"
        ) from None


async def install(node: str, openings: Sequence[Opening] = ()) -> None:
    """Installs (or rebuilds) the rules confining ``node``'s sandboxes, with ``openings`` (each
    worker's way to the local endpoint) let through; idempotent.

    Raises:
        AteletError: INTERNAL naming the command when iptables is missing or refuses (no
            CAP_NET_ADMIN): the atelet does not run sandboxes it cannot confine.
    """
    for program in families():
        rules = chain_rules(node, openings, ipv4=program == "iptables")
        restored = await _run([f"{program}-restore", "-w", "5", "--noflush"], stdin=rules.encode())
        if not restored.ok:
            raise internal(f"worker network isolation failed (the atelet needs CAP_NET_ADMIN): {restored.describe()}")
        for hook in HOOKS:
            if (await _run([program, "-w", "5", "-C", hook, *jump(node)])).ok:
                continue
            added = await _run([program, "-w", "5", "-I", hook, "1", *jump(node)])
            if not added.ok:
                raise internal(f"worker network isolation failed (the atelet needs CAP_NET_ADMIN): {added.describe()}")
    log.info(
        "worker network isolation: packets from %s+ pass only as replies and to their openings (chain %s)",
        netns.host_if_prefix(node),
        chain(node),
    )


async def remove(node: str) -> None:
    """Removes ``node``'s rules (no error when they are gone); call once no sandbox of it runs."""
    for program in families():
        for hook in HOOKS:
            while (await _run([program, "-w", "5", "-D", hook, *jump(node)])).ok:
                pass  # every copy, should an older atelet have left more than one
        await _run([program, "-w", "5", "-F", chain(node)])
        await _run([program, "-w", "5", "-X", chain(node)])
