"""Names of what the control plane tracks, and the addresses nodes register: the rules, checked
the same way wherever a value comes in (the REST API's request schemas, documents, settings).

- atespaces, templates, actors, tags, worker pools, containers: DNS-1123 labels
  (`domain.labels.DNS_LABEL`, Kubernetes' rule for object names);
- workers: DNS-1123 subdomains (an atelet names its workers `<pool>-<i>`);
- nodes: host names (RFC 1123; a node is named by its host or its worker pod), letters of
  either case;
- a node's atelet address: `host:port`; a worker's address: an IP address.

Each check returns the value or raises ValueError with a message for the person who sent it.
"""

from __future__ import annotations

import ipaddress
import re

from domain.labels import DNS_LABEL

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_HOST_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*$")
MAX_SUBDOMAIN = 253
"""The longest DNS-1123 subdomain or host name (each dot-separated part at most 63)."""


def shown(value: object, limit: int = 80) -> str:
    """`value` quoted for an error message, cut to `limit` characters (bad input can be huge)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…'"


def _is_subdomain(value: object, pattern: re.Pattern[str]) -> bool:
    return (
        isinstance(value, str)
        and len(value) <= MAX_SUBDOMAIN
        and pattern.fullmatch(value) is not None
        and all(len(part) <= 63 for part in value.split("."))
    )


def check_label_name(value: object, what: str = "name") -> str:
    """A DNS-1123 label: 1-63 lower-case letters, digits or '-', starting and ending with a
    letter or digit (atespaces, templates, actors, tags, worker pools).

    Raises:
        ValueError: `value` is not one.
    """
    if not isinstance(value, str) or not DNS_LABEL.fullmatch(value):
        raise ValueError(
            f"{shown(value)} is not a valid {what}: use 1-63 lower-case letters, digits or '-', starting and "
            "ending with a letter or digit (e.g. 'demo', 'agent-7')"
        )
    return value


def check_worker_name(value: object) -> str:
    """A DNS-1123 subdomain: 1-253 lower-case letters, digits, '-' and '.', each part starting
    and ending with a letter or digit (an atelet's `<pool>-<i>`).

    Raises:
        ValueError: `value` is not one.
    """
    if not _is_subdomain(value, _SUBDOMAIN):
        raise ValueError(
            f"{shown(value)} is not a valid worker name: use 1-253 lower-case letters, digits, '-' or '.', "
            "starting and ending with a letter or digit (e.g. 'default-0')"
        )
    assert isinstance(value, str)
    return value


def check_node_name(value: object) -> str:
    """A host name (RFC 1123): 1-253 letters, digits, '-' and '.', each part of at most 63
    starting and ending with a letter or digit (a host's name or a worker pod's name).

    Raises:
        ValueError: `value` is not one.
    """
    if not _is_subdomain(value, _HOST_NAME):
        raise ValueError(
            f"{shown(value)} is not a valid node name: use a host name of 1-253 letters, digits, '-' or '.' "
            "(e.g. 'node-1', 'worker-pod-x7f2.example')"
        )
    assert isinstance(value, str)
    return value


def check_ip(value: object) -> str:
    """An IPv4 or IPv6 address, as written.

    Raises:
        ValueError: `value` is not one.
    """
    try:
        ipaddress.ip_address(value if isinstance(value, str) else "")
    except ValueError:
        raise ValueError(f"{shown(value)} is not an IP address (e.g. 10.88.0.2 or fd00::2)") from None
    assert isinstance(value, str)
    return value


def check_host_port(value: object) -> str:
    """`host:port`: a host name, an IPv4 address or an IPv6 address (bracketed or not), then a
    TCP port 1-65535 after the last ':'.

    Raises:
        ValueError: `value` is not one.
    """
    problem = f"{shown(value)} is not host:port (e.g. 10.0.0.5:8085, [fd00::5]:8085 or node-1.example:8085)"
    if not isinstance(value, str) or ":" not in value:
        raise ValueError(problem)
    host, _, port = value.rpartition(":")
    if not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(problem)
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not _is_subdomain(host, _HOST_NAME):
            raise ValueError(problem) from None
    return value
