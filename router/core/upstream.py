"""Where an actor serves (``Upstream``), and how the texts name what its worker failed to send
(both data paths time a worker out alike)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where a RUNNING actor serves HTTP.

    Attributes:
        ip: The worker's IP address.
        port: The actor's serving port (from its template).
    """

    ip: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.ip}]" if ":" in self.ip else self.ip
        return f"{host}:{self.port}"


def missing_head(response_head_timeout_seconds: float) -> str:
    """What a worker silent for the response head timeout did not send (for ``response_head_timeout``)."""
    return f"response head within {response_head_timeout_seconds:g}s"


MISSING_END = "end of the response within the request timeout"
"""What a worker did not send when the whole-request timeout ran out (for ``response_head_timeout``)."""
