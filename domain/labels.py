"""Kubernetes-style labels and label selectors: what worker pools carry and templates and actors
select (placement check 5)."""

from __future__ import annotations

import re

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
"""A DNS-1123 label: atespace, actor, template, pool and container names."""

_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")

MAX_SELECTOR_LABELS = 10
"""At most this many `key: value` pairs in one selector (the reference system's limit)."""


def check_labels(value: object) -> dict[str, str]:
    """Validate a label map (Kubernetes label syntax: keys like `tier` or `ate.dev/zone`,
    values of at most 63 letters, digits, '-', '_' and '.').

    Returns:
        The same labels as a dict.

    Raises:
        ValueError: not a mapping of strings to strings, or a key or value is malformed; the
            message names the label.
    """
    if not isinstance(value, dict):
        raise ValueError(f"must be a mapping of label keys to values, got {type(value).__name__}")
    for key, item in value.items():
        if not isinstance(key, str) or len(key) > 253 or not _LABEL_KEY.fullmatch(key):
            raise ValueError(f"label key {key!r} is not a valid label key (e.g. 'tier', 'ate.dev/zone')")
        if not isinstance(item, str) or len(item) > 63 or not _LABEL_VALUE.fullmatch(item):
            raise ValueError(
                f"label value {item!r} of {key!r} is not a valid label value (letters, digits, '-', '_', '.')"
            )
    return dict(value)


def check_selector(value: object) -> dict[str, str]:
    """Validate a label selector: labels (see `check_labels`), at most MAX_SELECTOR_LABELS of them.

    Raises:
        ValueError: too many labels, or one is malformed.
    """
    if isinstance(value, dict) and len(value) > MAX_SELECTOR_LABELS:
        raise ValueError(f"has {len(value)} labels; at most {MAX_SELECTOR_LABELS} are allowed")
    return check_labels(value)


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """Whether `labels` carry every `key: value` of `selector` (an empty selector selects all)."""
    return all(labels.get(key) == value for key, value in selector.items())
