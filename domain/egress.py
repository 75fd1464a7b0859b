"""Egress policies: where an actor may connect out to, and which credential the egress proxy puts
into its requests to one host (issue 28). A template's `egress` (`domain.templates`) and an actor's
own, narrower one (the API) are read here; each node's egress proxy applies them (`atelet.egress`).
Without `egress` an actor has none.

A template (and an actor, narrowing it) declares:

    egress:
      allow:
        - {host: api.example.com, ports: [443]}
        - {host: "*.pypi.example", ports: [443]}
        - {cidr: 10.20.0.0/16, ports: [5432]}
      credentials:
        - {host: api.example.com, header: x-api-key, secret: model-key}

How a rule matches a destination:
- `host` is matched against the name the actor asked for (the Host header, the CONNECT target or
  the TLS SNI), lower-cased and without a trailing dot; the proxy resolves it, not the actor.
  `api.example.com` matches that name only. `*.example.com` matches every name that ends in
  `.example.com` with at least one label before it (`a.example.com`, `a.b.example.com`), never
  `example.com` itself (list it too if it is wanted), as Envoy's and Istio's `*.` do. A `*`
  anywhere else is refused. A host rule never matches an IP address written as the destination.
- `cidr` matches a destination written as an IP address inside it (IPv4 or IPv6).
- `ports` lists the destination ports the rule allows (1-65535, required: nothing is implied).

Whatever the rules say, these are never reached (`protected_reason`), unless the operator lists
the address in the proxy's settings: loopback, link-local (the cloud metadata address
169.254.169.254 among them), the unspecified and multicast addresses, the node itself, the control
plane, and the workers' subnets; a name whose resolved address is one of them is refused too.

A credential names an exact host that an allow rule admits, an HTTP header (not a hop-by-hop nor
a framing header) and a secret of the actor's atespace (`domain.secrets`): the proxy adds the
header with the secret's value to the actor's requests to that host, so the actor never holds it.
Standard library only.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from domain.idle import PolicyError
from domain.names import check_label_name, shown

MAX_EGRESS_RULES = 64
"""At most this many allow rules and this many credentials in one policy."""

_HOST_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_HEADER = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
FORBIDDEN_HEADERS = frozenset({
    "host", "connection", "keep-alive", "proxy-authorization", "proxy-authenticate", "proxy-connection",
    "te", "trailer", "transfer-encoding", "upgrade", "content-length",
})  # fmt: skip
"""Headers a credential may not set: hop-by-hop ones and those that frame the request."""

ALWAYS_PROTECTED = tuple(
    ipaddress.ip_network(n)
    for n in ("127.0.0.0/8", "::1/128", "169.254.0.0/16", "fe80::/10", "0.0.0.0/8", "::/128", "224.0.0.0/4",
              "ff00::/8", "100.100.100.200/32", "fd00:ec2::254/128", "::ffff:0:0/96")
)  # fmt: skip
"""Never reached whatever a policy says: loopback, link-local (169.254.169.254, the metadata
address of most clouds, is in it), unspecified, multicast, the metadata addresses outside
link-local (Alibaba's 100.100.100.200, AWS's IPv6 fd00:ec2::254), and IPv4 addresses written as
IPv6 (``::ffff:169.254.169.254``), which would dodge the IPv4 entries."""

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class EgressRule:
    """One allow rule: a host pattern (`host`, exact or `*.` wildcard) or a network (`cidr`), and
    the ports it allows."""

    ports: tuple[int, ...]
    host: str | None = None
    cidr: IpNetwork | None = None

    def text(self) -> str:
        """The rule as a log line names it: `host *.pypi.example ports 443`."""
        target = f"host {self.host}" if self.host is not None else f"cidr {self.cidr}"
        return f"{target} ports {','.join(str(p) for p in self.ports)}"

    def matches(self, destination: str, port: int) -> bool:
        """Whether this rule allows `destination` (a host name, or an IP address as text) on `port`."""
        if port not in self.ports:
            return False
        address = _address(destination)
        if self.cidr is not None:
            return address is not None and address.version == self.cidr.version and address in self.cidr
        if address is not None or self.host is None:
            return False
        name = destination.lower().rstrip(".")
        if self.host.startswith("*."):
            return name.endswith(self.host[1:]) and len(name) > len(self.host) - 1
        return name == self.host

    def covers(self, other: EgressRule) -> bool:
        """Whether everything `other` allows, this rule allows (an actor's rule within its template's)."""
        if not set(other.ports) <= set(self.ports):
            return False
        if self.cidr is not None or other.cidr is not None:
            return (
                self.cidr is not None and other.cidr is not None and other.cidr.version == self.cidr.version
                and other.cidr.subnet_of(self.cidr)  # type: ignore[arg-type]
            )  # fmt: skip
        assert self.host is not None and other.host is not None
        if self.host == other.host:
            return True
        return self.host.startswith("*.") and other.host.endswith(self.host[1:])


@dataclass(frozen=True)
class Credential:
    """A header the proxy adds, with a secret's value, to the actor's requests to `host`."""

    host: str
    header: str
    secret: str


@dataclass(frozen=True)
class Decision:
    """The proxy's answer for one connection: allowed or not, and the rule (or the reason) why,
    as the log line and the metrics name it."""

    allowed: bool
    rule: str


@dataclass(frozen=True)
class EgressPolicy:
    """An actor's egress: allow rules and credentials. No rules: no egress."""

    allow: tuple[EgressRule, ...] = ()
    credentials: tuple[Credential, ...] = ()

    def decide(self, destination: str, port: int) -> Decision:
        """Allow `destination` (a name as asked, or an IP address as text) on `port` by the first
        rule that matches; else refuse it, saying so."""
        for index, rule in enumerate(self.allow):
            if rule.matches(destination, port):
                return Decision(True, f"allow[{index}] ({rule.text()})")
        if not self.allow:
            return Decision(False, "the actor has no egress policy")
        return Decision(False, f"no rule allows {destination} port {port}")

    @property
    def off(self) -> bool:
        """No allow rule: the actor has no egress."""
        return not self.allow

    def document(self) -> dict[str, Any]:
        """The policy in its document form (`parse_egress_policy`'s inverse)."""
        allow: list[dict[str, Any]] = [
            {"host": r.host, "ports": list(r.ports)} if r.host is not None else {"cidr": str(r.cidr), "ports": list(r.ports)}
            for r in self.allow
        ]
        credentials = [{"host": c.host, "header": c.header, "secret": c.secret} for c in self.credentials]
        return {"allow": allow, "credentials": credentials}

    def credential_for(self, host: str) -> Credential | None:
        """The credential for requests to exactly `host`, if any."""
        name = host.lower().rstrip(".")
        return next((c for c in self.credentials if c.host == name), None)

    def narrowed(self, actor: EgressPolicy, field: str = "egress") -> EgressPolicy:
        """`actor`'s policy, checked to be within this (its template's) one.

        Raises:
            PolicyError: an actor's rule allows what no template rule does, or its credential
                differs from the template's for that host.
        """
        for index, rule in enumerate(actor.allow):
            if not any(mine.covers(rule) for mine in self.allow):
                raise PolicyError(field, f"allow[{index}]", f"{rule.text()} is not within the template's egress")
        for index, credential in enumerate(actor.credentials):
            if credential not in self.credentials:
                raise PolicyError(
                    field, f"credentials[{index}]", f"{credential.host} is not a credential of the template's egress"
                )
        return actor


def parse_egress_policy(value: Any, field: str = "egress") -> EgressPolicy:
    """Read an egress policy from its document form (module doc).

    Raises:
        PolicyError: naming the field below `field` and what is allowed: an unknown field, a host
            that is not a DNS name (or a `*.` wildcard of one), a CIDR that does not parse or has
            host bits set, a port out of 1-65535, a credential whose host is not exact or that no
            rule allows, a header that is not a token or may not be set, a malformed secret name.
    """
    if value is None:
        return EgressPolicy()
    if not isinstance(value, dict):
        raise PolicyError(field, "", f"must be a mapping with allow and credentials, not {shown(value)}")
    unknown = sorted(set(value) - {"allow", "credentials"})
    if unknown:
        raise PolicyError(field, unknown[0], "unknown field (allowed: allow, credentials)")
    rules = tuple(_rule(field, f"allow[{i}]", r) for i, r in enumerate(_items(field, "allow", value.get("allow"))))
    credentials = tuple(
        _credential(field, f"credentials[{i}]", c) for i, c in enumerate(_items(field, "credentials", value.get("credentials")))
    )  # fmt: skip
    policy = EgressPolicy(rules, credentials)
    for index, credential in enumerate(credentials):
        if not any(r.host is not None and r.matches(credential.host, p) for r in rules for p in r.ports):
            raise PolicyError(field, f"credentials[{index}].host", f"{credential.host} is not allowed by any allow rule")
    return policy


def protected_reason(
    address: str, protected: Iterable[IpNetwork] = (), exceptions: Iterable[IpNetwork] = ()
) -> str | None:
    """Why `address` (an IP address as text) is never reached, or None when it may be.

    Args:
        address: The destination, as resolved by the proxy (or as the actor wrote it).
        protected: The node's own networks: its addresses, the control plane's, the workers' subnets.
        exceptions: Networks the operator listed explicitly (they pass even if protected).
    """
    ip = _address(address)
    if ip is None:
        return f"{shown(address)} is not an IP address"
    if any(ip.version == n.version and ip in n for n in exceptions):
        return None
    for network in ALWAYS_PROTECTED:
        if ip.version == network.version and ip in network:
            return f"{ip} is in {network} (loopback, link-local, metadata or unspecified), never reached"
    for network in protected:
        if ip.version == network.version and ip in network:
            return f"{ip} is in {network}, an address of the node, the control plane or the workers"
    return None


def _address(text: str) -> IpAddress | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def _items(field: str, key: str, value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PolicyError(field, key, f"must be a list, not {shown(value)}")
    if len(value) > MAX_EGRESS_RULES:
        raise PolicyError(field, key, f"has {len(value)} entries; at most {MAX_EGRESS_RULES} are allowed")
    return value


def _mapping(field: str, path: str, value: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise PolicyError(field, path, f"must be a mapping with {', '.join(allowed)}, not {shown(value)}")
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise PolicyError(field, f"{path}.{unknown[0]}", f"unknown field (allowed: {', '.join(allowed)})")
    return value


def _rule(field: str, path: str, value: Any) -> EgressRule:
    fields = _mapping(field, path, value, ("host", "cidr", "ports"))
    if ("host" in fields) == ("cidr" in fields):
        raise PolicyError(field, path, "give exactly one of host and cidr")
    ports = _ports(field, f"{path}.ports", fields.get("ports"))
    if "host" in fields:
        return EgressRule(ports=ports, host=_host(field, f"{path}.host", fields["host"], wildcard=True))
    raw = fields["cidr"]
    try:
        cidr = ipaddress.ip_network(raw, strict=True) if isinstance(raw, str) else None
    except ValueError as error:
        raise PolicyError(field, f"{path}.cidr", f"{shown(raw)} is not a network ({error})") from None
    if cidr is None:
        raise PolicyError(field, f"{path}.cidr", f"must be a network such as 10.20.0.0/16, not {shown(raw)}")
    return EgressRule(ports=ports, cidr=cidr)


def _ports(field: str, path: str, value: Any) -> tuple[int, ...]:
    if value is None:
        raise PolicyError(field, path, "give the ports this rule allows, e.g. [443]")
    if not isinstance(value, list) or not value:
        raise PolicyError(field, path, f"must be a non-empty list of ports, not {shown(value)}")
    for index, port in enumerate(value):
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise PolicyError(field, f"{path}[{index}]", f"{shown(port)} is not a port (1-65535)")
    return tuple(sorted(set(value)))


def _host(field: str, path: str, value: Any, wildcard: bool) -> str:
    if not isinstance(value, str):
        raise PolicyError(field, path, f"must be a host name, not {shown(value)}")
    name = value.lower().rstrip(".")
    labels = name.split(".")
    if wildcard and labels[0] == "*":
        labels = labels[1:]
        if len(labels) < 2:
            raise PolicyError(field, path, f"{shown(value)}: a wildcard needs a domain of two labels or more after '*.'")
    ok = 0 < len(name) <= 253 and labels and all(_HOST_LABEL.fullmatch(label) for label in labels)
    if not ok or _address(name) is not None:
        allowed = "a DNS name such as api.example.com" + (", or *.example.com" if wildcard else "")
        raise PolicyError(field, path, f"{shown(value)} is not {allowed} (a network goes in cidr)")
    return name


def _credential(field: str, path: str, value: Any) -> Credential:
    fields = _mapping(field, path, value, ("host", "header", "secret"))
    for key in ("host", "header", "secret"):
        if key not in fields:
            raise PolicyError(field, f"{path}.{key}", "is required")
    host = _host(field, f"{path}.host", fields["host"], wildcard=False)
    header = fields["header"]
    if not isinstance(header, str) or not _HEADER.fullmatch(header):
        raise PolicyError(field, f"{path}.header", f"{shown(header)} is not an HTTP header name")
    if header.lower() in FORBIDDEN_HEADERS:
        raise PolicyError(field, f"{path}.header", f"{header} frames or routes the request and cannot be set")
    try:
        secret = check_label_name(fields["secret"], "secret name")
    except ValueError as error:
        raise PolicyError(field, f"{path}.secret", str(error)) from None
    return Credential(host=host, header=header.lower(), secret=secret)
