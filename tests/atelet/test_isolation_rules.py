"""The isolation rules as iptables holds them (real iptables/ip6tables, root): installing them
again (an atelet restart, `ate dev` restarting a crashed atelet) keeps one copy, the jumps come
first in INPUT and FORWARD (ahead of any rule that could accept), and removing them twice leaves nothing and fails nowhere."""

from __future__ import annotations

import hashlib
import subprocess
import uuid

import pytest

from atelet import isolation, local_endpoint_rules
from tests.atelet.conftest import isolation_rules, runsc_missing

pytestmark = [pytest.mark.runsc, pytest.mark.asyncio]


def rules_before(program: str, hook: str, rule: str) -> list[str]:
    """The rules of ``hook`` ahead of ``rule``, but other nodes' isolation jumps (other atelets
    of this machine may start meanwhile and put theirs first)."""
    listed = subprocess.run([program, "-w", "5", "-S", hook], capture_output=True, text=True, check=True)
    lines = listed.stdout.splitlines()[1:]  # line 0 is the policy
    return [line for line in lines[: lines.index(rule)] if "-j ATE-ISOLATE-" not in line]


async def test_installing_twice_keeps_one_copy_and_removing_leaves_nothing() -> None:
    reason = runsc_missing()
    if reason:
        pytest.fail(reason)
    node = f"iso-{uuid.uuid4().hex[:8]}"
    tag = hashlib.sha256(node.encode()).hexdigest()[:4]  # the tag of the node's veths, atv<tag><i>
    chain = f"ATE-ISOLATE-{tag}"
    expected = sorted(
        f"{program} {line}"
        for program in ("iptables", "ip6tables")
        for line in (
            f"-N {chain}",
            f"-A INPUT -i atv{tag}+ -j {chain}",
            f"-A FORWARD -i atv{tag}+ -j {chain}",
            f"-A {chain} -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
            # refused at once: a reset for TCP, port unreachable for UDP, the rest dropped
            f"-A {chain} -p tcp -j REJECT --reject-with tcp-reset",
            f"-A {chain} -p udp -j REJECT --reject-with "
            + ("icmp-port-unreachable" if program == "iptables" else "icmp6-port-unreachable"),
            f"-A {chain} -j DROP",
        )
    )
    try:
        await isolation.install(node)
        await isolation.install(node)
        assert sorted(isolation_rules(node)) == expected
        for program in ("iptables", "ip6tables"):
            for hook in ("INPUT", "FORWARD"):
                assert rules_before(program, hook, f"-A {hook} -i atv{tag}+ -j {chain}") == []
        await isolation.remove(node)
        await isolation.remove(node)
        assert isolation_rules(node) == []
    finally:
        await isolation.remove(node)


async def test_the_local_endpoint_opens_one_port_per_worker_and_redirects_its_address_there() -> None:
    """With the local endpoint on, the IPv4 chain lets through exactly each worker's connections
    from its own address to its own gateway's endpoint port (before the refusals), IPv6 stays closed,
    and the nat chain sends 169.254.100.1:80 from the node's veths to that port; removing leaves
    nothing of either."""
    reason = runsc_missing()
    if reason:
        pytest.fail(reason)
    node = f"iso-{uuid.uuid4().hex[:8]}"
    tag = hashlib.sha256(node.encode()).hexdigest()[:4]
    chain, nat_chain = f"ATE-ISOLATE-{tag}", f"ATE-LOCAL-{tag}"
    openings = [
        isolation.Opening(f"atv{tag}0", "10.97.0.2", "10.97.0.1", 18086),
        isolation.Opening(f"atv{tag}1", "10.97.0.6", "10.97.0.5", 18086),
    ]
    try:
        await isolation.install(node, openings)
        await local_endpoint_rules.install(node, 18086)
        await local_endpoint_rules.install(node, 18086)
        v4 = [line for line in isolation_rules(node) if line.startswith(f"iptables -A {chain}")]
        assert v4 == [
            f"iptables -A {chain} -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
            f"iptables -A {chain} -s 10.97.0.2/32 -d 10.97.0.1/32 -i atv{tag}0 -p tcp -m tcp --dport 18086 -j RETURN",
            f"iptables -A {chain} -s 10.97.0.6/32 -d 10.97.0.5/32 -i atv{tag}1 -p tcp -m tcp --dport 18086 -j RETURN",
            f"iptables -A {chain} -p tcp -j REJECT --reject-with tcp-reset",
            f"iptables -A {chain} -p udp -j REJECT --reject-with icmp-port-unreachable",
            f"iptables -A {chain} -j DROP",
        ]
        assert not [line for line in isolation_rules(node) if line.startswith("ip6tables") and "dport" in line]
        assert nat_rules(nat_chain) == [
            f"-N {nat_chain}",
            f"-A PREROUTING -i atv{tag}+ -j {nat_chain}",
            f"-A {nat_chain} -d 169.254.100.1/32 -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 18086",
        ]
        await local_endpoint_rules.remove(node)
        assert nat_rules(nat_chain) == []
    finally:
        await local_endpoint_rules.remove(node)
        await isolation.remove(node)


def nat_rules(chain: str) -> list[str]:
    """The nat table's rules naming `chain`."""
    listed = subprocess.run(["iptables", "-w", "5", "-t", "nat", "-S"], capture_output=True, text=True, check=True)
    return [line for line in listed.stdout.splitlines() if chain in line]
