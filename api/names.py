"""Validation of names: atespaces, templates, actors, tags and nodes, in request bodies, paths
and queries (the rules are `domain.names`)."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Request

from api.errors import InvalidArgument
from domain.names import check_label_name, check_node_name


def check_name(field: str, value: str) -> str:
    """Return `value` when it is a DNS-1123 label, else raise InvalidArgument naming `field`.

    A DNS-1123 label: 1 to 63 characters, lower-case letters, digits and '-', starting and ending
    with a letter or digit (Kubernetes' rule for object names; the reference system uses it too).
    """
    try:
        return check_label_name(value, "name")
    except ValueError as error:
        raise InvalidArgument(f"{field} {error}", {"field": field}) from None


_PATH_NAMES: dict[str, Callable[[str], str]] = {
    "atespace": lambda v: check_label_name(v, "atespace name"),
    "name": lambda v: check_label_name(v, "name"),
    "node": check_node_name,
    "replica": lambda v: check_label_name(v, "router replica name"),
}
"""The path parameters of the API's routes that are names, and the rule of each."""

_QUERY_NAMES: dict[str, Callable[[str], str]] = {
    "atespace": lambda v: check_label_name(v, "atespace name"),
    "actor": lambda v: check_label_name(v, "actor name"),
}
"""The query parameters that are names (an empty one means "not given")."""


async def check_request_names(request: Request) -> None:
    """An app-wide dependency: every name in the request's path and query follows its rule, so
    no malformed name reaches the store or Temporal (an unknown well-formed one is a 404 there).

    Raises:
        InvalidArgument: a name is malformed; the message names the parameter.
    """
    for key, value in request.path_params.items():
        rule = _PATH_NAMES.get(key)
        if rule is not None:
            _check(rule, value, f"path parameter {key}")
    for key, rule in _QUERY_NAMES.items():
        for value in request.query_params.getlist(key):
            if value:
                _check(rule, value, f"query parameter {key}")


def _check(rule: Callable[[str], str], value: str, field: str) -> None:
    try:
        rule(value)
    except ValueError as error:
        raise InvalidArgument(f"invalid request: {field}: {error}", {"field": field}) from None
