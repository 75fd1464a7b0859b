"""What a crashed atelet leaves behind, found and turned into cleanup commands.

The atelet removes these itself on its next start (runsc sandboxes under its runsc root, its
workers' network namespaces and veths) and rebuilds its isolation rules in place. When `ate dev`
stops while the atelet is not running, nothing cleans up, so `ate dev` lists them with the
commands that remove them (`report_leftovers`). Names follow atelet/netns.py and
atelet/isolation.py: namespace `ate-<node>-<worker>`, host veth end `atv<tag><i>`, filter chain
`ATE-ISOLATE-<tag>` (jumped to from INPUT and FORWARD, IPv4 and IPv6), where `<tag>` is 4 hex
digits of sha256(node). The rules match only the node's veths, so leaving them is harmless.
"""

import hashlib
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

Run = Callable[[list[str]], str | None]
"""Runs a command and returns its stdout, or None when it could not run or failed."""


def run_quietly(argv: list[str]) -> str | None:
    """Run `argv` (10 s at most) and return its stdout; None when missing or failing."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout if result.returncode == 0 else None


def netns_prefix(node: str) -> str:
    """The start of every network namespace name of `node`'s workers."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", f"ate-{node}-")


def veth_prefix(node: str) -> str:
    """The start of the host-side veth names of `node`'s workers."""
    return "atv" + hashlib.sha256(node.encode()).hexdigest()[:4]


def isolation_chain(node: str) -> str:
    """The filter chain of `node`'s isolation rules."""
    return "ATE-ISOLATE-" + hashlib.sha256(node.encode()).hexdigest()[:4]


@dataclass
class Leftovers:
    """Sandboxes, namespaces, veths and isolation rules of one node that are still there.

    `jumps` are `(program, rule)` pairs, e.g. `("iptables", "INPUT -i atv998c+ -j ATE-ISOLATE-998c")`;
    `chains` are `(program, chain)` pairs.
    """

    runsc_root: Path
    containers: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    veths: list[str] = field(default_factory=list)
    jumps: list[tuple[str, str]] = field(default_factory=list)
    chains: list[tuple[str, str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.containers or self.namespaces or self.veths or self.jumps or self.chains)

    def commands(self) -> list[str]:
        """Commands that remove them, in order: sandboxes first (they hold the namespaces), the
        isolation rules last (they keep the sandboxes confined until then)."""
        return [
            *(f"runsc --root={self.runsc_root} delete --force {cid}" for cid in self.containers),
            *(f"ip netns delete {name}" for name in self.namespaces),
            *(f"ip link delete {name}" for name in self.veths),
            *(f"{program} -D {rule}" for program, rule in self.jumps),
            *(f"{program} -F {chain} && {program} -X {chain}" for program, chain in self.chains),
        ]


def find_leftovers(node: str, state_dir: Path, run: Run = run_quietly) -> Leftovers:
    """Look for `node`'s runsc containers under `<state_dir>/runsc`, namespaces, veths and isolation rules.

    Args:
        node: The atelet's node name.
        state_dir: The atelet's `--state-dir`.
        run: Runs `runsc`, `ip`, `iptables` and `ip6tables` (injectable for tests).

    Returns:
        What was found (commands that cannot run find nothing).
    """
    found = Leftovers(runsc_root=state_dir / "runsc")
    if found.runsc_root.is_dir():
        out = run(["runsc", f"--root={found.runsc_root}", "list", "-quiet"]) or ""
        found.containers = [line.strip() for line in out.splitlines() if line.strip()]
    prefix = netns_prefix(node)
    for line in (run(["ip", "netns", "list"]) or "").splitlines():
        name = line.split(" ", 1)[0].strip()
        if name.startswith(prefix):
            found.namespaces.append(name)
    veth = veth_prefix(node)
    for line in (run(["ip", "-o", "link", "show"]) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            name = parts[1].strip().split("@", 1)[0]
            if name.startswith(veth):
                found.veths.append(name)
    chain = isolation_chain(node)
    for program in ("iptables", "ip6tables"):
        for line in (run([program, "-S"]) or "").splitlines():
            if line == f"-N {chain}":
                found.chains.append((program, chain))
            elif line.startswith("-A ") and line.endswith(f"-j {chain}"):
                found.jumps.append((program, line[len("-A ") :]))
    return found


def report_leftovers(node: str, state_dir: Path, out: Callable[[str], None], run: Run = run_quietly) -> None:
    """Print what a stopped atelet left behind, with the commands that remove it.

    `ate dev` calls this when it stops while the atelet is not running, so nothing cleaned up.

    Args:
        node: The atelet's node name.
        state_dir: The atelet's `--state-dir`.
        out: Prints one line.
        run: Runs `runsc` and `ip` (injectable for tests).
    """
    found = find_leftovers(node, state_dir, run)
    if not found:
        out("ate: the atelet was not running; no leftover sandboxes or network namespaces found")
        return
    out(
        "ate: the atelet was not running, so its sandboxes and network namespaces are left over: the next"
        " 'ate dev' adopts the sandboxes that still run (their actors keep their memory) and removes the rest;"
        " to remove them all now instead (running actors then lose their memory), run as root:"
    )
    for command in found.commands():
        out(f"  {command}")
