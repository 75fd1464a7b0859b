"""The isolation rules as iptables holds them (real iptables/ip6tables, root): installing them
again (an atelet restart, `ate dev` restarting a crashed atelet) keeps one copy, the jumps come
first in INPUT and FORWARD (ahead of any rule that could accept), and removing them twice leaves nothing and fails nowhere."""

from __future__ import annotations

import hashlib
import subprocess
import uuid

import pytest

from atelet import isolation
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
