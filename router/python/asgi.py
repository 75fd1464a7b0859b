"""The ASGI shapes the Python data path passes around (type aliases only)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]  # ASGI receive
Send = Callable[[Message], Awaitable[None]]  # ASGI send
