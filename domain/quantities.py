"""Kubernetes-style resource quantities: CPU ("500m", "2") and memory ("256Mi", "1G", "1024")."""

from __future__ import annotations

import math
import re

from domain.names import shown

_CPU = re.compile(r"^(\d+(?:\.\d+)?)(m?)$")
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
MAX_CPU_MILLIS = 10**9
"""The most CPU one worker or actor can have, in millicores (a million cores): beyond any
machine, and far inside PostgreSQL's bigint."""

MAX_MEMORY_BYTES = 2**50
"""The most memory one worker or actor can have, in bytes (1 PiB)."""

WORKER_PLACES = 1
"""The actors one worker hosts at once: a worker is one sandbox with one address (the atelet runs
one sandbox per worker), so one. A pool that wants more actors at once has more workers (replicas)."""

_MEMORY_FACTORS = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def parse_cpu_millis(value: str | int | float) -> int:
    """Parse a CPU quantity into millicores.

    Args:
        value: "500m" (millicores), "2" or "0.5" (cores), or a number of cores.

    Returns:
        Millicores, e.g. 500 for "500m" and 2000 for "2".

    Raises:
        ValueError: the value is not a positive CPU quantity of at most MAX_CPU_MILLIS.
    """
    text = str(value).strip()
    match = _CPU.fullmatch(text) if len(text) <= 32 else None
    if not match:
        raise ValueError(f"{shown(value)} is not a CPU quantity (examples: 500m, 1, 2.5)")
    number = float(match.group(1)) * (1 if match.group(2) else 1000)
    if not math.isfinite(number) or number > MAX_CPU_MILLIS:
        raise ValueError(f"{shown(value)} is more CPU than ate allows ({MAX_CPU_MILLIS // 1000} cores)")
    millis = round(number)
    if millis <= 0:
        raise ValueError(f"{shown(value)} must be positive")
    return millis


def parse_memory_bytes(value: str | int) -> int:
    """Parse a memory quantity into bytes.

    Args:
        value: "256Mi", "2Gi", "1G", "500k" or a number of bytes.

    Returns:
        Bytes, e.g. 268435456 for "256Mi".

    Raises:
        ValueError: the value is not a positive memory quantity of at most MAX_MEMORY_BYTES.
    """
    text = str(value).strip()
    match = _MEMORY.fullmatch(text) if len(text) <= 32 else None
    if not match:
        raise ValueError(f"{shown(value)} is not a memory quantity (examples: 256Mi, 2Gi, 1G)")
    number = float(match.group(1)) * _MEMORY_FACTORS[match.group(2)]
    if not math.isfinite(number) or number > MAX_MEMORY_BYTES:
        raise ValueError(f"{shown(value)} is more memory than ate allows (1024Ti)")
    if int(number) <= 0:
        raise ValueError(f"{shown(value)} must be positive")
    return int(number)


def check_worker_places(value: object) -> int:
    """A worker's `places`, which must be WORKER_PLACES.

    Raises:
        ValueError: it is anything but 1; the message (to follow the field's name, e.g.
            `workers[0].places must be 1, got 4: ...`) says what to do instead.
    """
    if value != WORKER_PLACES or isinstance(value, bool):
        raise ValueError(
            f"must be {WORKER_PLACES}, got {shown(value)}: a worker is one sandbox with one address and hosts "
            "one actor at a time; for more actors at once, run more workers (a pool's spec.replicas)"
        )
    return WORKER_PLACES


def format_cpu(millis: int) -> str:
    """Millicores as a CPU quantity: 500 -> "500m", 2000 -> "2"."""
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def format_memory(value: int) -> str:
    """Bytes as the largest binary unit that divides them: 268435456 -> "256Mi", 1000 -> "1000"."""
    for suffix in ("Ti", "Gi", "Mi", "Ki"):
        factor = _MEMORY_FACTORS[suffix]
        if value and value % factor == 0:
            return f"{value // factor}{suffix}"
    return str(value)
