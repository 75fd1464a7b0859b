"""Validation of names: atespaces, templates, actors, label keys and values."""

from __future__ import annotations

import re

from api.errors import InvalidArgument

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def check_name(field: str, value: str) -> str:
    """Return `value` when it is a DNS-1123 label, else raise InvalidArgument naming `field`.

    A DNS-1123 label: 1 to 63 characters, lower-case letters, digits and '-', starting and ending
    with a letter or digit (Kubernetes' rule for object names; the reference system uses it too).
    """
    if not isinstance(value, str) or len(value) > 63 or not _DNS1123_LABEL.fullmatch(value):
        raise InvalidArgument(
            f"{field} {_shown(value)} is not a valid name: use 1-63 lower-case letters, digits or '-', "
            "starting and ending with a letter or digit (e.g. 'demo', 'agent-7')",
            {"field": field},
        )
    return value


def _shown(value: object, limit: int = 80) -> str:
    """`value` quoted for an error message, cut to `limit` characters (bad input can be huge)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…'"
