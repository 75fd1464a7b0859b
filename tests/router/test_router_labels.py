"""One DNS-label rule: the nginx data path checks labels with ``domain.labels.DNS_LABEL``'s own
pattern, handed to its Lua at config time, and keeps no copy of it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from domain.labels import DNS_LABEL
from router.nginx import config as nginx_config
from router.nginx.config import NginxLayout
from router.settings import RouterSettings

LUA_DIR = Path(nginx_config.__file__).parent

VALID = ["a", "0", "demo", "c1", "my-space", "actor-9", "a-b-c", "x" * 63, "0a", "a0", "a--b", "1-" * 31 + "1"]
INVALID = ["", "-", "-a", "a-", "A", "Demo", "de_mo", "c.1", "c 1", "x" * 64, "ü", "a/b", "a:b", "1-" * 32 + "1"]


def test_the_nginx_config_hands_lua_the_domain_rule(tmp_path: Path) -> None:
    conf = nginx_config.render(RouterSettings(database_url=None), NginxLayout(tmp_path, "127.0.0.1:1"))
    assert f"label = {nginx_config._lua_string(DNS_LABEL.pattern)}" in conf


def test_the_lua_keeps_no_label_pattern_of_its_own() -> None:
    for lua in LUA_DIR.glob("*.lua"):
        assert "[-a-z0-9]" not in lua.read_text(), lua.name
    assert "cfg.label" in (LUA_DIR / "ate_target.lua").read_text()  # the target check uses the given one


@pytest.mark.parametrize("value", VALID + INVALID)
def test_the_pattern_as_lua_searches_it_is_the_domain_rule(value: str) -> None:
    # ngx.re.find searches (it is not anchored by itself): the pattern's own anchors make the
    # search a full match, as DNS_LABEL.fullmatch decides (header values carry no line feed).
    assert (re.search(DNS_LABEL.pattern, value) is not None) == (DNS_LABEL.fullmatch(value) is not None)
    assert (DNS_LABEL.fullmatch(value) is not None) == (value in VALID)
