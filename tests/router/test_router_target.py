"""Target parsing: header and host forms, malformed values."""

from __future__ import annotations

import pytest

from domain.refs import ActorRef
from router.core.target import (
    TargetError,
    parse_header,
    parse_host,
    parse_target,
    strip_port,
)

D = "ate.local"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("demo/c1", ActorRef("demo", "c1")),
        ("  demo/c1 ", ActorRef("demo", "c1")),
        ("a/b", ActorRef("a", "b")),
        ("my-space/actor-9", ActorRef("my-space", "actor-9")),
        ("x" * 63 + "/" + "y" * 63, ActorRef("x" * 63, "y" * 63)),
    ],
)
def test_header_ok(value: str, expected: ActorRef) -> None:
    assert parse_header(value) == expected
    assert parse_target(value, "ignored.example", D) == expected


@pytest.mark.parametrize(
    "value",
    ["demo", "demo/", "/c1", "demo/c1/x", "Demo/c1", "demo/C1", "-demo/c1", "demo/c1-",
     "de_mo/c1", "demo/c.1", "x" * 64 + "/c1", "demo/" + "y" * 64, "demo /c1"],
)
def test_header_bad(value: str) -> None:
    with pytest.raises(TargetError) as err:
        parse_header(value)
    message = str(err.value)
    assert repr(value.strip()) in message
    assert "<atespace>/<name>" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("c1.demo.actors.ate.local", ActorRef("demo", "c1")),
        ("c1.demo.actors.ate.local:8000", ActorRef("demo", "c1")),
        ("c1.demo.actors.ate.local.", ActorRef("demo", "c1")),
        ("c1.demo.actors.ate.local.:443", ActorRef("demo", "c1")),
        ("C1.Demo.Actors.ATE.local", ActorRef("demo", "c1")),
    ],
)
def test_host_ok(host: str, expected: ActorRef) -> None:
    assert parse_host(host, D) == expected
    assert parse_target(None, host, D) == expected


def test_host_custom_domain() -> None:
    assert parse_host("a.b.actors.example.com", "example.com") == ActorRef("b", "a")
    with pytest.raises(TargetError):
        parse_host("a.b.actors.ate.local", "example.com")


@pytest.mark.parametrize(
    "host",
    ["localhost", "127.0.0.1:8000", "demo.actors.ate.local", "x.c1.demo.actors.ate.local",
     "c1..actors.ate.local", "c_1.demo.actors.ate.local", "c1.demo.actors.ate.localx",
     "c1.demo.ate.local", "-c1.demo.actors.ate.local", ("z" * 64) + ".demo.actors.ate.local",
     "c1.demo.actors.ate.local..", "[::1]:80"],
)
def test_host_bad(host: str) -> None:
    with pytest.raises(TargetError) as err:
        parse_target(None, host, D)
    message = str(err.value)
    assert repr(host) in message
    assert "<name>.<atespace>.actors.ate.local" in message


@pytest.mark.parametrize("value", ["", " ", "\t "])
def test_empty_header_is_an_error_even_with_a_good_host(value: str) -> None:
    with pytest.raises(TargetError, match=r"^empty ate-target-actor header"):
        parse_target(value, "c1.demo.actors.ate.local", D)


def test_missing_target() -> None:
    with pytest.raises(TargetError, match="no target actor"):
        parse_target(None, None, D)


def test_header_wins_and_bad_header_is_not_rescued_by_host() -> None:
    assert parse_target("demo/c2", "c1.demo.actors.ate.local", D) == ActorRef("demo", "c2")
    with pytest.raises(TargetError):
        parse_target("bad", "c1.demo.actors.ate.local", D)


def test_strip_port() -> None:
    assert strip_port("a.b:80") == "a.b"
    assert strip_port("a.b") == "a.b"
    assert strip_port("[::1]:80") == "[::1]"
    assert strip_port("[::1]") == "[::1]"


def test_key() -> None:
    assert ActorRef("demo", "c1").key == "demo/c1"
    assert str(ActorRef("demo", "c1")) == "demo/c1"
