"""Which actor a request is for: parsing of the ``ate-target-actor`` header and the Host.

Pure functions, no I/O. Two forms are accepted:

* header ``ate-target-actor: <atespace>/<name>``, which wins when present;
* Host ``<name>.<atespace>.actors.<domain>`` (port stripped, one trailing dot allowed).

Both labels are DNS-1123 labels (``domain.labels.DNS_LABEL``, the one rule of the project:
lower-case letters, digits and ``-``, starting and ending alphanumeric, at most 63 characters).
An actor is a ``domain.refs.ActorRef``.
"""

from __future__ import annotations

from domain.labels import DNS_LABEL
from domain.refs import ActorRef

TARGET_HEADER = "ate-target-actor"


class TargetError(ValueError):
    """The request names no actor, or names one malformed.

    The message is one line naming the bad value and the expected form, fit for a 400 body.
    """


def is_label(value: str) -> bool:
    """Tell whether ``value`` is a DNS-1123 label of at most 63 characters.

    Args:
        value: Candidate label.

    Returns:
        True when valid.
    """
    return DNS_LABEL.fullmatch(value) is not None


def parse_header(value: str) -> ActorRef:
    """Parse an ``ate-target-actor`` header value.

    Args:
        value: ``"<atespace>/<name>"``, surrounding blanks ignored.

    Returns:
        The target.

    Raises:
        TargetError: Empty, or not two valid labels separated by one ``/``.
    """
    text = value.strip()
    form = (
        "expected <atespace>/<name>, both DNS-1123 labels "
        "(lower-case letters, digits, '-', at most 63 characters)"
    )
    if not text:
        raise TargetError(f"empty {TARGET_HEADER} header; {form}")
    parts = text.split("/")
    if len(parts) != 2:
        raise TargetError(f"bad {TARGET_HEADER} header {text!r}: {form}")
    atespace, name = parts
    for what, label in (("atespace", atespace), ("name", name)):
        if not is_label(label):
            raise TargetError(f"bad {TARGET_HEADER} header {text!r}: {what} {label!r} is not valid; {form}")
    return ActorRef(atespace, name)


def strip_port(host: str) -> str:
    """Remove a ``:port`` suffix from a Host value (IPv6 literals kept intact).

    Args:
        host: Host header value, e.g. ``"c1.demo.actors.ate.local:8000"``.

    Returns:
        The host without its port.
    """
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end >= 0 else host
    head, sep, tail = host.rpartition(":")
    if sep and tail.isdigit():
        return head
    return host


def parse_host(host: str, domain: str) -> ActorRef:
    """Parse a Host of the form ``<name>.<atespace>.actors.<domain>``.

    Args:
        host: Host header value; port and one trailing dot are allowed; case-insensitive.
        domain: Configured domain, e.g. ``"ate.local"``.

    Returns:
        The target.

    Raises:
        TargetError: The host is not under ``actors.<domain>`` or its two labels are invalid.
    """
    domain = domain.strip(".").lower()
    suffix = f".actors.{domain}"
    form = f"expected <name>.<atespace>{suffix} or header {TARGET_HEADER}: <atespace>/<name>"
    original = host
    name_part = strip_port(host.strip()).lower().removesuffix(".")
    if not name_part.endswith(suffix):
        raise TargetError(f"bad host {original!r}: {form}")
    labels = name_part[: -len(suffix)].split(".")
    if len(labels) != 2:
        raise TargetError(f"bad host {original!r}: {form}")
    name, atespace = labels
    for what, label in (("name", name), ("atespace", atespace)):
        if not is_label(label):
            raise TargetError(
                f"bad host {original!r}: {what} {label!r} is not a DNS-1123 label "
                f"(lower-case letters, digits, '-', at most 63 characters); {form}"
            )
    return ActorRef(atespace, name)


def parse_target(header: str | None, host: str | None, domain: str) -> ActorRef:
    """Find the target of a request.

    Args:
        header: The ``ate-target-actor`` header value, or None when absent.
        host: The Host header value, or None when absent.
        domain: Configured actor domain.

    Returns:
        The target; the header wins over the Host (even when empty: that is an error, not a
        fall-through to the Host).

    Raises:
        TargetError: Neither names a valid actor; the message names the bad value and the
            expected forms.
    """
    if header is not None:
        return parse_header(header)
    if not host:
        raise TargetError(
            f"no target actor: send header {TARGET_HEADER}: <atespace>/<name> "
            f"or Host <name>.<atespace>.actors.{domain.strip('.')}"
        )
    return parse_host(host, domain)


def decode_header(value: bytes) -> str:
    """Decode a header value for parsing and messages: UTF-8, bad bytes as U+FFFD.

    Args:
        value: Raw header bytes.

    Returns:
        The text (never Latin-1 mojibake such as ``Ã¼`` for ``ü``).
    """
    return value.decode("utf-8", errors="replace")


def target_from_headers(values: list[bytes], host: bytes | None, domain: str) -> ActorRef:
    """Find the target from the raw ``ate-target-actor`` values and Host of a request.

    Args:
        values: Every ``ate-target-actor`` header value, in order (usually zero or one).
        host: The Host header value, or None.
        domain: Configured actor domain.

    Returns:
        The target (see ``parse_target``).

    Raises:
        TargetError: More than one ``ate-target-actor`` header (the message names them), or
            as ``parse_target``.
    """
    texts = [decode_header(v) for v in values]
    if len(texts) > 1:
        got = " and ".join(repr(t.strip()) for t in texts)
        raise TargetError(f"duplicate {TARGET_HEADER} header: got {got}; send exactly one")
    return parse_target(texts[0] if texts else None, None if host is None else decode_header(host), domain)


_TARGET_HEADER = TARGET_HEADER.encode()


def scan_head(headers: list[tuple[bytes, bytes]]) -> tuple[list[bytes], bytes | None]:
    """Pick what names the target out of a request's raw headers (lower-case names, as ASGI
    gives them), in one pass.

    Args:
        headers: The request's headers.

    Returns:
        Every ``ate-target-actor`` value in order, and the (last) Host or None; give them to
        ``target_from_headers``.
    """
    values: list[bytes] = []
    host: bytes | None = None
    for key, value in headers:
        if key == _TARGET_HEADER:
            values.append(value)
        elif key == b"host":
            host = value
    return values, host


def target_label(headers: list[tuple[bytes, bytes]]) -> str:
    """The first ``ate-target-actor`` header as given, at most 200 characters (for logs and
    /statusz), or ``-`` when there is none."""
    for key, value in headers:
        if key == _TARGET_HEADER:
            return str(value.decode("latin-1"))[:200]
    return "-"
