"""The headers of a proxied HTTP exchange: what the router sends the worker (the client's, minus
hop-by-hop ones and the target header, plus X-Forwarded-* and ``Connection: close``) and what it
relays back to the client. Split from router.python.proxy; the WebSocket handshake uses the
same rules (router.python.websocket)."""

from __future__ import annotations

from collections.abc import Sequence
from ipaddress import IPv4Network, IPv6Network, ip_address

from router.core.target import TARGET_HEADER
from router.python.asgi import Scope
from router.python.upstream_client import UpstreamResponse

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
_DROP_REQUEST = HOP_BY_HOP | {
    TARGET_HEADER.encode(),
    b"host",
    b"expect",
    b"x-forwarded-for",
    b"x-forwarded-host",
    b"x-forwarded-proto",
}



def _connection_tokens(headers: list[tuple[bytes, bytes]]) -> set[bytes]:
    tokens: set[bytes] = set()
    for key, value in headers:
        if key.lower() == b"connection":
            tokens.update(t.strip().lower() for t in value.split(b",") if t.strip())
    return tokens


def request_headers(scope: Scope, trusted: Sequence[IPv4Network | IPv6Network] = ()) -> list[tuple[bytes, bytes]]:
    """Headers to send upstream for an ASGI HTTP request.

    Args:
        scope: ASGI HTTP scope (lower-case header names).
        trusted: Networks of trusted proxies in front of the router: only a client in one of
            them may bring an ``X-Forwarded-For`` of its own.

    Returns:
        The client's headers without hop-by-hop ones (including those named by
        ``Connection``), ``ate-target-actor``, ``Host`` and ``Expect``; plus
        ``X-Forwarded-For`` (the client's address, appended to the incoming one only when the
        client is a trusted proxy, else replacing it), ``X-Forwarded-Host``,
        ``X-Forwarded-Proto`` and ``Connection: close``.
    """
    raw: list[tuple[bytes, bytes]] = scope["headers"]
    drop = _DROP_REQUEST | _connection_tokens(raw)
    out: list[tuple[bytes, bytes]] = []
    host = b""
    forwarded_for: list[bytes] = []
    for key, value in raw:
        if key == b"host":
            host = value
        elif key == b"x-forwarded-for":
            forwarded_for.append(value)
        if key not in drop:
            out.append((key, value))
    client = scope.get("client")
    if client and not _is_trusted(str(client[0]), trusted):
        forwarded_for = []  # an untrusted client does not get to say where requests came from
    if client:
        forwarded_for.append(str(client[0]).encode())
    if forwarded_for:
        out.append((b"x-forwarded-for", b", ".join(forwarded_for)))
    if host:
        out.append((b"x-forwarded-host", host))
    out.append((b"x-forwarded-proto", str(scope.get("scheme", "http")).encode()))
    out.append((b"connection", b"close"))
    return out


def _is_trusted(address: str, trusted: Sequence[IPv4Network | IPv6Network]) -> bool:
    if not trusted:
        return False
    try:
        ip = ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in trusted)


def response_headers(response: UpstreamResponse) -> list[tuple[bytes, bytes]]:
    """Headers to relay to the client: the worker's, minus hop-by-hop ones.

    Args:
        response: The worker's response (raw header bytes are kept, duplicates included).

    Returns:
        ASGI header list with lower-case names.
    """
    raw = response.headers
    drop = HOP_BY_HOP | _connection_tokens(raw)
    return [(k, v) for k, v in raw if k not in drop]

