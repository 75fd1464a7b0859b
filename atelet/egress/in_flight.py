"""Which sandboxes have outbound traffic in flight through the node's egress proxy, read off the
kernel's TCP sockets (``ss`` of iproute2) when the heartbeat asks.

A sandbox has outbound traffic in flight while it holds a connection to one of Squid's ports.
Squid closes a client connection that rests between requests after ``IDLE_CONNECTION_SECONDS``
(``client_idle_pconn_timeout``, ``atelet.egress.squid_config``), so an idle keep-alive stops
counting soon after its last answer, however long its client library would keep it. A request
waiting for a slow upstream counts for as long as it waits (its connection is open).

What the byte timings of a socket cannot tell apart was measured here: a TLS 1.3 connection the
proxy terminates (to add a credential) gets the proxy's session tickets just after the actor's
request, so "the actor spoke last" does not mean "waiting for an answer". Hence the open
connection as the measure. Its cost: a TLS connection the proxy passes through unopened (a host
without a credential) counts while it is open, even at rest, until the client closes it or Squid's
``read_timeout`` (15 minutes) does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from atelet import proc

log = logging.getLogger(__name__)

IDLE_CONNECTION_SECONDS = 5
"""Squid closes a sandbox's connection resting between requests after this long (seconds)."""


def open_peers(text: str) -> set[str]:
    """The peer addresses in ``text``, the output of ``ss -tnHO state established``: one socket
    per line, ``Recv-Q Send-Q local peer``. IPv4 peers only (the workers' addresses)."""
    peers: set[str] = set()
    for line in text.splitlines():
        columns = line.split()
        if len(columns) >= 4 and columns[3].count(":") == 1:
            peers.add(columns[3].split(":")[0])
    return peers


def ss_arguments(ports: Iterable[int]) -> list[str]:
    """The ``ss`` command line listing the established TCP sockets on ``ports`` (local side)."""
    condition = " or ".join(f"sport = :{port}" for port in sorted(set(ports)))
    return ["ss", "-tnHO", "state", "established", f"( {condition} )"]


async def peers_in_flight(ports: Iterable[int]) -> set[str]:
    """The addresses holding a connection to one of ``ports`` of this host (module doc); empty
    when ``ss`` fails (logged; the heartbeat goes on without it)."""
    try:
        done = await proc.run(ss_arguments(ports), timeout=5)
    except (OSError, TimeoutError) as error:  # no ss, or one too slow: the heartbeat must go on
        log.warning("egress: the connections in flight could not be listed: %s", error or "ss timed out")
        return set()
    if not done.ok:
        log.warning("egress: the connections in flight could not be listed: %s", done.describe())
        return set()
    return open_peers(done.stdout)


def sockets(text: str) -> int:
    """How many sockets ``ss`` listed in ``text`` (one per line of four columns or more)."""
    return sum(1 for line in text.splitlines() if len(line.split()) >= 4)


async def cut(ports: Iterable[int], address: str) -> int:
    """Shuts every established connection of ``address`` to one of ``ports`` of this host (``ss
    -K``: the kernel resets both ends); returns how many it shut. One still there afterwards (a
    kernel without socket destruction) is logged. Raises nothing (a failure is logged, 0 returned)."""
    listing = ss_arguments(ports)
    listing[-1:-1] = ["dst", address]
    try:
        done = await proc.run([listing[0], "-K", *listing[1:]], timeout=5)
        left = await proc.run(listing, timeout=5)
    except (OSError, TimeoutError) as error:
        log.warning("egress: the connections of %s could not be cut: %s", address, error or "ss timed out")
        return 0
    if not done.ok:
        log.warning("egress: the connections of %s could not be cut: %s", address, done.describe())
        return 0
    remaining = sockets(left.stdout) if left.ok else 0
    if remaining:
        log.warning("egress: %d connection(s) of %s survived the cut (does the kernel destroy sockets? "
                    "CONFIG_INET_DIAG_DESTROY)", remaining, address)  # fmt: skip
    return max(sockets(done.stdout) - remaining, 0)
