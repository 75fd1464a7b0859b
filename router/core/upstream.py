"""Small value types shared by the router modules."""

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
