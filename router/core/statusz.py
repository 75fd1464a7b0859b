"""`/statusz` on the router's port: what an operator wants to see at a glance, as HTML for a
person and JSON with `?format=json`: the version, the settings, whether the API and PostgreSQL
answer, how many requests are parked, and the last 100 requests.

It answers only requests that name no actor (no `ate-target-actor` header, no actor host name):
every other path and every request that names an actor belongs to the actors.
"""

from __future__ import annotations

import html
import json
import time
from collections import deque
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

PATH = "/statusz"
RECENT = 100
"""How many requests /statusz lists."""


@dataclass(frozen=True, slots=True)
class RecentRequest:
    """One finished request as /statusz lists it (the path without its query)."""

    time: float
    request_id: str
    target: str
    method: str
    path: str
    status: int
    outcome: str
    ms: float


class RecentRequests:
    """The last RECENT requests, newest first."""

    def __init__(self, size: int = RECENT) -> None:
        self._items: deque[RecentRequest] = deque(maxlen=size)

    def add(self, item: RecentRequest) -> None:
        """Remember one finished request (the oldest is forgotten)."""
        self._items.appendleft(item)

    def items(self) -> list[RecentRequest]:
        """Newest first."""
        return list(self._items)


def postgres_health(invalidator: Any) -> str:
    """The PostgreSQL line of /statusz from the cache invalidator (a `router.core.cache.CacheInvalidator`
    or None): "ok", "not connected (cache off)", or "not configured (no cache)"."""
    if invalidator is None:
        return "not configured (no cache)"
    return "ok" if invalidator.connected.is_set() else "not connected (cache off)"


def ate_version() -> str:
    """The installed ate package's version, or `unknown`."""
    try:
        return version("ate")
    except PackageNotFoundError:
        return "unknown"


def status_document(
    *, settings: dict[str, Any], api: str, postgres: str, parked: int, max_parked: int, recent: list[RecentRequest]
) -> dict[str, Any]:
    """The /statusz content: {version, settings, health{api, postgres}, parked, max_parked,
    recent[{time, request_id, target, method, path, status, outcome, ms}]}."""
    return {
        "version": ate_version(),
        "settings": settings,
        "health": {"api": api, "postgres": postgres},
        "parked": parked,
        "max_parked": max_parked,
        "recent": [asdict(r) for r in recent],
    }


def render_json(document: dict[str, Any]) -> bytes:
    """The document as JSON."""
    return json.dumps(document, indent=2, default=str).encode()


def render_html(document: dict[str, Any]) -> bytes:
    """The document as one self-contained HTML page (no script, no outside resources)."""
    e = html.escape
    settings = "".join(f"<tr><th>{e(str(k))}</th><td>{e(str(v))}</td></tr>" for k, v in document["settings"].items())
    health = "".join(
        f'<tr><th>{e(part)}</th><td class="{"ok" if state == "ok" else "bad"}">{e(state)}</td></tr>'
        for part, state in document["health"].items()
    )
    rows = "".join(
        "<tr>"
        f"<td>{e(time.strftime('%H:%M:%S', time.gmtime(r['time'])))}</td><td>{e(r['target'])}</td>"
        f"<td>{e(r['method'])}</td><td>{e(r['path'])}</td><td>{r['status']}</td>"
        f"<td>{e(r['outcome'])}</td><td>{r['ms']:.1f}</td><td><code>{e(r['request_id'])}</code></td>"
        "</tr>"
        for r in document["recent"]
    )
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>ate router /statusz</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; margin-bottom: 1.5em; }}
th, td {{ border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; font-size: 0.9em; }}
.ok {{ color: #0a0; }} .bad {{ color: #c00; font-weight: bold; }}
</style></head>
<body>
<h1>ate router</h1>
<p>version <span id="version">{e(document["version"])}</span> ·
parked requests <span id="parked">{document["parked"]}</span> of {document["max_parked"]} ·
<a href="{PATH}?format=json">JSON</a></p>
<h2>Health</h2><table id="health">{health}</table>
<h2>Last {len(document["recent"])} requests (newest first)</h2>
<table id="recent"><tr><th>time (UTC)</th><th>target</th><th>method</th><th>path</th><th>status</th>
<th>outcome</th><th>ms</th><th>request id</th></tr>{rows}</table>
<h2>Settings</h2><table id="settings">{settings}</table>
</body></html>
"""
    return page.encode()
