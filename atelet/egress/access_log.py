"""Squid's access log, read line by line: the egress metrics and the log line of each denial.

Each line holds ``squid_config.ACCESS_FIELDS`` (space-separated; the host, SNI, actor and rule
%-encoded). Squid logs one line per transaction, and some transactions are its own bookkeeping,
so ``classify`` sorts them:

- denied: ``TCP_DENIED`` (``http_access`` refused it: the helper, or the protected networks,
  ``ERR_ATE_PROTECTED``), ``terminate`` (intercepted TLS refused on its SNI), or
  ``ERR_CONFLICT_HOST`` (the name's DNS answer does not hold the address the sandbox dialled);
- skipped: the other ``NONE`` lines (the fake CONNECT of intercepted TLS, the CONNECT of a
  bumped connection, whose requests have lines of their own, an error page delivered inside a
  refused CONNECT);
- allowed: the rest (requests, tunnels; an upstream that failed too), with their bytes.

The actor is the helper's ``ate_actor`` annotation or, for lines without it, whatever runs on
the worker whose address the client has.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote

from atelet import metrics
from atelet.egress.decision import is_address
from atelet.egress.squid_config import ACCESS_FIELDS, PROTECTED_PAGE

log = logging.getLogger(__name__)

_NAMES = [name for name, _ in ACCESS_FIELDS]


@dataclass(frozen=True)
class Entry:
    """One access log line's fields (``-`` where Squid had none)."""

    client: str
    actor: str
    status: str
    code: str
    method: str
    host: str
    port: str
    sni: str
    bump: str
    sent: int
    received: int
    error: str
    rule: str

    @property
    def destination(self) -> str:
        """``host:port`` as asked: the SNI over a dialled address."""
        host = self.sni if self.sni != "-" and (self.host == "-" or is_address(self.host)) else self.host
        return f"{host}:{self.port}"


def _count(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def parse_line(line: str) -> Entry | None:
    """The ``Entry`` of one line, or None when it has not the fields of ``ACCESS_FIELDS``."""
    words = line.split()
    if len(words) != len(_NAMES):
        return None
    values = dict(zip(_NAMES, words, strict=True))
    return Entry(
        client=values["client"], actor=unquote(values["actor"]), status=values["status"], code=values["code"],
        method=values["method"], host=unquote(values["host"]).lower(), port=values["port"],
        sni=unquote(values["sni"]).lower(), bump=values["bump"], sent=_count(values["sent"]),
        received=_count(values["received"]), error=values["error"], rule=unquote(values["rule"]),
    )  # fmt: skip


def classify(entry: Entry) -> tuple[str, str]:
    """(``allowed`` | ``denied`` | ``skipped``, the rule): module doc."""
    if entry.status == "TCP_DENIED":
        return "denied", "protected address" if entry.error == PROTECTED_PAGE else (entry.rule if entry.rule != "-" else "denied")
    if entry.bump == "terminate":
        return "denied", entry.rule if entry.rule != "-" else "terminated"
    if entry.error == "ERR_CONFLICT_HOST":
        return "denied", "host conflict"
    if entry.status.startswith("NONE"):
        return "skipped", ""
    return "allowed", entry.rule


class AccessLog:
    """Counts and logs what Squid's access log says.

    Args:
        actor_of: the ``atespace/name`` of the actor on the worker with a given address, or ``-``.
        on_allowed: called with the client address of each allowed transaction (its traffic
            makes the actor active: ``EgressProxy.active_workers``).
    """

    def __init__(self, actor_of: Callable[[str], str], on_allowed: Callable[[str], None] | None = None) -> None:
        self.actor_of = actor_of
        self.on_allowed = on_allowed

    def consume(self, line: str) -> None:
        """Takes one line (ignored when malformed or skipped)."""
        entry = parse_line(line)
        if entry is None:
            if line.strip():
                log.debug("egress: unreadable access log line %r", line[:300])
            return
        outcome, rule = classify(entry)
        if outcome == "skipped":
            return
        actor = entry.actor if entry.actor not in ("", "-") else self.actor_of(entry.client)
        if outcome == "denied":
            metrics.observe_egress_denied(actor, entry.destination, rule)
            log.info("egress denied: actor %s -> %s (%s %s): %s", actor, entry.destination, entry.method,
                     entry.code, rule)  # fmt: skip
        else:
            metrics.observe_egress(actor, entry.destination, entry.sent, entry.received)
            if self.on_allowed is not None:
                self.on_allowed(entry.client)
            log.debug("egress: actor %s -> %s (%s %s, %d/%d bytes): %s", actor, entry.destination, entry.method,
                      entry.code, entry.sent, entry.received, rule)  # fmt: skip
