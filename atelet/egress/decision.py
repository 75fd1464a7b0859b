"""The egress decision for one connection or request, as Squid's helper asks for it (pure).

Squid asks through its ``external_acl_type`` helper (``atelet.egress.relay``) with one line per
lookup: a channel ID, then ``FIELDS`` (each %-encoded by Squid, ``-`` when unknown):

- the client's address (the sandbox's worker address) and the local address and port it reached
  (the worker's gateway and the explicit proxy port; for an intercepted connection, the address
  and port the sandbox dialled);
- the destination host as the request names it (the ``Host`` header, the CONNECT target, or the
  dialled address of intercepted TLS before its SNI is known) and port;
- the TLS SNI (once Squid peeked at the ClientHello), and the method.

``decide`` answers with a ``Verdict``: the actor (whatever runs on the worker whose address the
client has, now), whether its policy (``domain.egress.EgressPolicy``) allows the destination, the
rule why, and, for a host with a credential, that Squid is to terminate the TLS (bump) and the
header value it adds. ``Verdict.reply`` is the helper's answer line: ``OK`` or ``ERR`` with
annotations Squid keeps for the transaction (``ate_actor``, ``ate_rule`` for the access log;
``ate_bump``; ``ate_cred_<slot>`` for ``request_header_add``; ``message`` for the 403 page).

A destination written as an IP address is checked against the protected networks first
(``domain.egress.protected_reason``); a name is checked by the policy here and, once Squid
resolved it, by Squid's own ``dst`` ACL of the same networks (``atelet.egress.squid_config``).
Where the request names both a host and an SNI (an explicit CONNECT), both must be allowed.

A credential is added only to a request inside TLS whose every name is the credential's host:
a request whose ``Host`` and TLS name differ (domain fronting), a plain-HTTP request to that host
and a ``TRACE`` (whose answer would echo the header) are refused, saying so.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote

from domain.egress import EgressPolicy, IpNetwork, protected_reason

FIELDS = ("client", "local_address", "local_port", "host", "port", "sni", "method")
"""The request fields of a helper line, after its channel ID (``squid_config.HELPER_FORMAT``)."""


@dataclass(frozen=True)
class Ask:
    """One lookup of Squid's helper.

    Attributes:
        client: the client's IP address (a worker's address for a sandbox).
        local_address: the address the client reached (gateway, or the dialled one if intercepted).
        local_port: the port it reached.
        host: the destination as the request names it, lower-cased, without a trailing dot
            (brackets of an IPv6 literal removed).
        port: the destination port (0 when Squid did not know it).
        sni: the TLS SNI, lower-cased, or None.
        method: the HTTP method (``CONNECT`` for tunnels and intercepted TLS).
    """

    client: str
    local_address: str
    local_port: int
    host: str
    port: int
    sni: str | None
    method: str


def _name(text: str) -> str:
    return text.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def parse_ask(fields: Sequence[str]) -> Ask:
    """An ``Ask`` from a helper line's fields after the channel ID (``FIELDS``; more are ignored,
    missing ones count as ``-``). Never raises: a malformed field becomes empty or 0."""
    values = [unquote(f) for f in fields[: len(FIELDS)]]
    values += ["-"] * (len(FIELDS) - len(values))
    client, local_address, local_port, host, port, sni, method = ("" if v == "-" else v for v in values)
    return Ask(
        client=client, local_address=local_address, local_port=_int(local_port), host=_name(host),
        port=_int(port), sni=_name(sni) or None, method=method.upper(),
    )  # fmt: skip


def is_address(text: str) -> bool:
    """Whether ``text`` is an IP address (not a name)."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Credential:
    """A header value to add: the header's slot in the node's list of names (``HeaderSlots``) and
    the secret's value (never shown by ``repr``)."""

    slot: int
    header: str
    value: str = field(repr=False)


@dataclass(frozen=True)
class Verdict:
    """The answer to one ``Ask``.

    Attributes:
        allowed: whether the connection or request may go on.
        actor: ``atespace/name`` of the actor asking, or ``-`` when none is known.
        destination: the destination decided on (the name, or the address), with its port.
        rule: the allow rule that matched (``allow[0] (host ... ports 443)``) or why not.
        message: what the 403 page tells the actor (denials).
        bump: terminate the actor's TLS (a credential applies to the host).
        credential: the header value to add, if any.
    """

    allowed: bool
    actor: str
    destination: str
    rule: str
    message: str = ""
    bump: bool = False
    credential: Credential | None = None

    def reply(self) -> str:
        """The helper's answer (without the channel ID): ``OK``/``ERR`` and its annotations."""
        words = ["OK" if self.allowed else "ERR", f"ate_actor={quote(self.actor)}", f"ate_rule={quote(self.rule)}"]
        if not self.allowed:
            words += ["ate_denied=1", f"message={quote(self.message or self.rule)}"]
        if self.bump:
            words.append("ate_bump=1")
        if self.credential is not None:
            words.append(f"ate_cred_{self.credential.slot}={quote(self.credential.value)}")
        return " ".join(words)


def quote(value: str) -> str:
    """A helper-reply value: double-quoted, with ``\\`` and ``"`` escaped (Squid's ``strwordtok``
    reading); control characters become spaces (a reply is one line)."""
    clean = "".join(c if c >= " " and c != "\x7f" else " " for c in value)
    return '"' + clean.replace("\\", "\\\\").replace('"', '\\"') + '"'


def header_value_ok(value: str) -> bool:
    """Whether ``value`` can be an HTTP header value as it is (no control character but tab)."""
    return all(c == "\t" or (" " <= c and c != "\x7f") for c in value)


def refuse(actor: str, destination: str, rule: str, message: str) -> Verdict:
    """A denial."""
    return Verdict(False, actor, destination, rule, message)


@dataclass(frozen=True)
class Protection:
    """The networks no policy reaches (beyond ``domain.egress.ALWAYS_PROTECTED``) and the
    operator's exceptions to them."""

    protected: tuple[IpNetwork, ...] = ()
    exceptions: tuple[IpNetwork, ...] = ()

    def reason(self, address: str) -> str | None:
        """Why ``address`` is never reached, or None."""
        return protected_reason(address, self.protected, self.exceptions)


def decide(
    ask: Ask,
    actor: str,
    policy: EgressPolicy,
    protection: Protection,
    values: dict[str, str],
    slots: dict[str, int],
) -> Verdict:
    """Decide ``ask`` for ``actor`` (``atespace/name``) by its ``policy``.

    Args:
        ask: the lookup.
        actor: the actor running on the client's worker.
        policy: its egress policy in force.
        protection: the protected networks.
        values: each credential's secret value by credential host.
        slots: the header names the asking Squid configuration can add, by name, to their slot
            (names it cannot add yet deny the request, to be retried: ``EgressProxy``).

    Returns:
        The verdict: denied naming the rule (or protection) that refused it, or allowed naming
        the matching rule, with the bump and credential for a host that has one.
    """
    port = ask.port
    names = [n for n in dict.fromkeys((ask.host, ask.sni or "")) if n]
    if not names:
        return refuse(actor, f"?:{port}", "no destination", f"{actor}: the request names no destination")
    shown = next((n for n in reversed(names) if not is_address(n)), names[0])  # the SNI over a dialled address
    destination = f"{shown}:{port}"
    for name in names:
        if is_address(name):
            why = protection.reason(name)
            if why is not None:
                return refuse(actor, destination, "protected address", f"{actor} may not reach {name}: {why}")
    if policy.off:
        return refuse(actor, destination, "no egress policy",
                      f"actor {actor} has no egress policy: it connects nowhere (an egress allow list in "
                      "its template grants destinations)")  # fmt: skip
    rule = ""
    for name in names:
        if is_address(name) and any(not is_address(n) for n in names):
            continue  # intercepted TLS: decided on its SNI, which Squid checks resolves to this address
        decision = policy.decide(name, port)
        if not decision.allowed:
            return refuse(actor, destination, decision.rule, f"actor {actor} may not reach {name} port {port}: "
                          f"{decision.rule}")  # fmt: skip
        rule = rule or decision.rule
    credential = next((c for n in names if (c := policy.credential_for(n)) is not None), None)
    if credential is None:
        return Verdict(True, actor, destination, rule)
    # The secret goes only where every name the request gives is the credential's host (the
    # Host header or CONNECT target, and the TLS name; the address an intercepted connection
    # dialled is checked by Squid to be the name's), and only inside TLS.
    named = [n for n in names if not (is_address(n) and any(not is_address(m) for m in names))]
    others = [n for n in named if n != credential.host]
    if others:
        return refuse(actor, destination, "credential host mismatch",
                      f"the credential of {credential.host} is added only to requests whose host and TLS name "
                      f"are both {credential.host}; this one also names {others[0]}")  # fmt: skip
    if ask.method == "CONNECT":  # the tunnel itself (no request yet): terminate its TLS, its requests get the header
        return Verdict(True, actor, destination, rule, bump=True)
    if ask.sni != credential.host:
        return refuse(actor, destination, "credential needs TLS",
                      f"requests to {credential.host} carry a credential, which the egress proxy never sends "
                      f"in clear: use https://{credential.host}")  # fmt: skip
    if ask.method == "TRACE":
        return refuse(actor, destination, "credential echo",
                      f"TRACE to {credential.host} is refused: its answer would show the actor the credential")
    value = values.get(credential.host)
    if value is None:
        return refuse(actor, destination, "credential unavailable",
                      f"the control plane gave no value for the credential of {credential.host} "
                      f"(secret {credential.secret}); try again once it exists")  # fmt: skip
    if not header_value_ok(value):
        return refuse(actor, destination, "credential unusable",
                      f"secret {credential.secret} cannot be sent as header {credential.header}: it holds "
                      "a control character")  # fmt: skip
    slot = slots.get(credential.header)
    if slot is None:
        return refuse(actor, destination, "credential header loading",
                      f"the egress proxy is loading header {credential.header} for the credential of "
                      f"{credential.host}; retry in a second")  # fmt: skip
    return Verdict(True, actor, destination, rule, bump=True, credential=Credential(slot, credential.header, value))
