"""The credential header names this node's Squid can add, each in a slot of its own.

Squid's ``request_header_add`` takes a fixed header name, so its configuration has one line per
name, adding the value the helper annotated for that slot (``ate_cred_<slot>``). The names come
from the policies the node fetched; the list only grows (a name's slot never changes, so a
configuration Squid still runs keeps meaning what it meant) and is kept in the state dir, names
only (never a value), so that a restarted atelet renders the same lines at once.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

MAX_SLOTS = 256
"""At most this many distinct header names per node (beyond them, a credential is refused)."""


class HeaderSlots:
    """The header names by slot, persisted in ``path`` (a JSON list of lower-case names).

    Args:
        path: the file (created on the first ``add``; an unreadable one counts as empty).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            loaded = json.loads(path.read_text())
            self.names: list[str] = [n for n in loaded if isinstance(n, str)] if isinstance(loaded, list) else []
        except (OSError, ValueError):
            self.names = []

    def slots(self, count: int | None = None) -> dict[str, int]:
        """Name to slot of the first ``count`` names (all when None)."""
        names = self.names if count is None else self.names[:count]
        return {name: slot for slot, name in enumerate(names)}

    def add(self, names: list[str]) -> bool:
        """Appends the names not known yet (lower-cased) and persists the list; True when any
        was new. Names beyond ``MAX_SLOTS`` are not added (logged)."""
        new = [n for n in dict.fromkeys(n.lower() for n in names) if n not in self.names]
        room = MAX_SLOTS - len(self.names)
        if len(new) > room:
            log.warning("egress: header names %s not added: the node adds at most %d names", new[room:], MAX_SLOTS)
            new = new[: max(room, 0)]
        if not new:
            return False
        self.names.extend(new)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.names))
        os.replace(tmp, self.path)
        return True
