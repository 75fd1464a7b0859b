"""The networks no actor reaches through the egress proxy, whatever its policy says.

Beyond ``domain.egress.ALWAYS_PROTECTED`` (loopback, link-local and metadata addresses...):
every address of this node's network namespace when the atelet starts (``ip -o addr``; an
address added later is still refused by the kernel, ``atelet.egress.rules``), the workers'
subnet, the addresses the API server's name resolves to, and the operator's
``egress_protected_networks`` (the rest of the control plane, other nodes, the pods' network);
``egress_allowed_exceptions`` pass even so.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from urllib.parse import urlsplit

from atelet import proc
from atelet.egress.decision import Protection
from atelet.settings import AteletSettings
from domain.egress import IpNetwork

log = logging.getLogger(__name__)


def host_network(address: str) -> IpNetwork:
    """The one-address network of ``address`` (``/32`` or ``/128``)."""
    return ipaddress.ip_network(address)


async def node_addresses() -> list[IpNetwork]:
    """Every address of this network namespace (``ip -o addr``), as one-address networks; empty
    when ``ip`` fails (logged)."""
    listed = await proc.run(["ip", "-o", "addr"], timeout=20)
    if not listed.ok:
        log.warning("egress: the node's addresses are unknown (%s); only the kernel's rule keeps them closed",
                    listed.describe())  # fmt: skip
        return []
    found = []
    for line in listed.stdout.splitlines():
        words = line.split()
        if len(words) > 3 and words[2] in ("inet", "inet6"):
            try:
                found.append(host_network(words[3].split("/")[0]))
            except ValueError:
                continue
    return found


async def api_addresses(api_server: str | None) -> list[IpNetwork]:
    """The addresses ``api_server``'s host resolves to (empty when unset or unresolvable)."""
    host = urlsplit(api_server or "").hostname
    if not host:
        return []
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as error:
        log.warning("egress: the API server's name %s does not resolve (%s)", host, error)
        return []
    return [host_network(str(info[4][0]).split("%")[0]) for info in infos]


async def protection(settings: AteletSettings) -> Protection:
    """The node's ``Protection`` (module doc)."""
    protected: list[IpNetwork] = [*await node_addresses(), ipaddress.ip_network(settings.subnet)]
    protected += await api_addresses(settings.api_server)
    protected += [ipaddress.ip_network(n) for n in settings.egress_protected_networks]
    exceptions = [ipaddress.ip_network(n) for n in settings.egress_allowed_exceptions]
    return Protection(tuple(dict.fromkeys(protected)), tuple(exceptions))
