"""What a crashed atelet leaves behind, found and turned into cleanup commands.

The atelet removes these itself on its next start (runsc sandboxes under its runsc root, its
workers' network namespaces and veths). When `ate dev` stops while the atelet is not running,
nothing cleans up, so `ate dev` lists them with the commands that remove them
(`report_leftovers`). Names follow atelet/netns.py: namespace `ate-<node>-<worker>`, host veth
end `atv<4 hex of sha256(node)><i>`.
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


@dataclass
class Leftovers:
    """Sandboxes, namespaces and veths of one node that are still there."""

    runsc_root: Path
    containers: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    veths: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.containers or self.namespaces or self.veths)

    def commands(self) -> list[str]:
        """Commands that remove them, in order: sandboxes first (they hold the namespaces)."""
        return [
            *(f"runsc --root={self.runsc_root} delete --force {cid}" for cid in self.containers),
            *(f"ip netns delete {name}" for name in self.namespaces),
            *(f"ip link delete {name}" for name in self.veths),
        ]


def find_leftovers(node: str, state_dir: Path, run: Run = run_quietly) -> Leftovers:
    """Look for `node`'s runsc containers under `<state_dir>/runsc`, namespaces and veths.

    Args:
        node: The atelet's node name.
        state_dir: The atelet's `--state-dir`.
        run: Runs `runsc` and `ip` (injectable for tests).

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
        "ate: the atelet was not running, so its sandboxes and network namespaces are left over"
        " (its next start removes them); to remove them now, run as root:"
    )
    for command in found.commands():
        out(f"  {command}")
