"""`/statusz` on the router's port: version, settings (secrets hidden), health of the API and
PostgreSQL, parked requests, and the last requests (path without query), as JSON and as HTML
that a real headless browser (Debian's chromium) renders."""

from __future__ import annotations

import asyncio
import html.parser
import shutil
import subprocess

from tests.router.conftest import StartRouter

H = {"ate-target-actor": "demo/c1"}


async def test_statusz_json_lists_health_settings_and_recent_requests(start_router: StartRouter) -> None:
    env = await start_router(api_token="secret-router-token")
    assert (await env.client.get("/echo?password=hunter2", headers=H)).status_code == 200
    assert (await env.client.get("/x", headers={"ate-target-actor": "Bad"})).status_code == 400
    document = (await env.client.get("/statusz", params={"format": "json"})).json()
    assert document["health"] == {"api": "ok", "postgres": "not configured (no cache)"}
    assert document["parked"] == 0 and document["max_parked"] == 1000
    assert document["settings"]["api_token"] == "***" and "secret-router-token" not in str(document)
    first, second = document["recent"][1], document["recent"][0]  # newest first
    assert (first["target"], first["method"], first["path"], first["status"], first["outcome"]) == (
        "demo/c1", "GET", "/echo", 200, "ok",
    )  # fmt: skip
    assert (second["target"], second["path"], second["status"], second["outcome"]) == ("Bad", "/x", 400, "bad_target")
    assert "hunter2" not in str(document)


async def test_statusz_says_when_the_api_does_not_answer(start_router: StartRouter) -> None:
    env = await start_router(api_server="http://127.0.0.1:9")
    document = (await env.client.get("/statusz", params={"format": "json"})).json()
    assert document["health"]["api"] == "unreachable (ConnectError)"


async def test_a_request_naming_an_actor_at_statusz_goes_to_the_actor(start_router: StartRouter) -> None:
    env = await start_router()
    response = await env.client.get("/statusz", headers=H)
    assert response.json()["path"] == "/statusz"  # the worker's echo, not the router's page


class _Tables(html.parser.HTMLParser):
    """The text of each cell of the tables with an id, row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._table = dict(attrs).get("id")
            if self._table:
                self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._table and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


async def test_statusz_renders_in_a_real_headless_browser(start_router: StartRouter) -> None:
    chromium = shutil.which("chromium")
    assert chromium, "chromium is installed by scripts/install.sh"
    env = await start_router()
    assert (await env.client.get("/echo", headers=H)).status_code == 200
    argv = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--user-data-dir=/tmp/ate-statusz-chromium", "--dump-dom", f"{env.url}/statusz"]  # fmt: skip
    done = await asyncio.to_thread(subprocess.run, argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    tables = _Tables()
    tables.feed(done.stdout)
    assert tables.tables["health"] == [["api", "ok"], ["postgres", "not configured (no cache)"]]
    header, *rows = tables.tables["recent"]
    assert header[:6] == ["time (UTC)", "target", "method", "path", "status", "outcome"]
    assert rows and rows[0][1:6] == ["demo/c1", "GET", "/echo", "200", "ok"]
    assert "<title>ate router /statusz</title>" in done.stdout
