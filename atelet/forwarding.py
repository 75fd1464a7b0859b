"""Forwarding of the pod IP into the worker's network namespace (`--advertise-worker-ip`).

In a worker pod the worker's sandbox has its own network namespace and address inside the pod
(gVisor cannot checkpoint with `--network=host`), which nothing outside the pod can reach. The
atelet therefore rewrites every TCP connection to the pod IP, except to its own ports (gRPC,
metrics), to the worker's address: a DNAT rule in a chain of its own (`ATE-FORWARD`, rebuilt at
each start, so a restart leaves one copy), and IP forwarding on in the pod's namespace. Replies
go back through the pod by the worker's default route and connection tracking undoes the
rewrite. The router then reaches an actor at `<pod IP>:<its port>` as it reaches a worker's
address under `ate dev`.
"""

from __future__ import annotations

import logging
from pathlib import Path

from atelet import proc
from atelet.errors import internal

log = logging.getLogger(__name__)

CHAIN = "ATE-FORWARD"
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")


async def _iptables(*args: str, check: bool = True) -> proc.Result:
    result = await proc.run(["iptables", "-w", "5", "-t", "nat", *args], timeout=20)
    if check and not result.ok:
        raise internal(f"forwarding setup failed: {result.describe()}")
    return result


async def install(advertised_ip: str, worker_ip: str, keep_ports: list[int]) -> None:
    """Forward TCP to `advertised_ip` (the pod IP), but to `keep_ports`, to `worker_ip`.

    Raises:
        AteletError: INTERNAL when iptables or the sysctl refuse (the pod lacks NET_ADMIN).
    """
    try:
        IP_FORWARD.write_text("1\n")
    except OSError as error:
        raise internal(f"forwarding setup failed: cannot enable IP forwarding: {error}") from None
    if not (await _iptables("-L", CHAIN, "-n", check=False)).ok:
        await _iptables("-N", CHAIN)
    await _iptables("-F", CHAIN)
    ports = ",".join(str(p) for p in sorted(set(keep_ports)))
    await _iptables(
        "-A", CHAIN, "-d", advertised_ip, "-p", "tcp", "-m", "multiport", "!", "--dports", ports,
        "-j", "DNAT", "--to-destination", worker_ip,
    )  # fmt: skip
    if not (await _iptables("-C", "PREROUTING", "-j", CHAIN, check=False)).ok:
        await _iptables("-I", "PREROUTING", "-j", CHAIN)
    log.info("forwarding TCP to %s (but ports %s) to the worker at %s", advertised_ip, ports, worker_ip)


async def remove() -> None:
    """Undo `install` (no error when there is nothing to undo)."""
    await _iptables("-D", "PREROUTING", "-j", CHAIN, check=False)
    await _iptables("-F", CHAIN, check=False)
    await _iptables("-X", CHAIN, check=False)
