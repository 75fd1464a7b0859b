"""Limits on parsed documents (domain.documents): depth, values, strings, and printable text."""

from __future__ import annotations

from typing import Any

import pytest

from domain.documents import DocumentError, Limits, check_document, printable


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def test_thirty_two_levels_pass_and_thirty_three_do_not() -> None:
    check_document(nested(32))
    with pytest.raises(DocumentError) as refused:
        check_document(nested(33))
    assert (refused.value.path, refused.value.problem) == ("[0]" * 32, "nests deeper than 32 levels")


def test_a_shared_object_counts_each_time_it_is_used() -> None:
    shared = list(range(10))
    check_document([shared] * 9, Limits(max_values=100))  # 1 + 9 + 90 values
    with pytest.raises(DocumentError, match="holds more than 100 values"):
        check_document([shared] * 10, Limits(max_values=100))  # 1 + 10 + 100


@pytest.mark.parametrize(
    ("document", "path", "problem"),
    [
        ({"a": {"b": "x\x00"}}, "a.b", "must not contain NUL characters (\\u0000)"),
        ({"a": ["ok", "\ud800"]}, "a[1]", "must be valid Unicode text (it holds a lone surrogate such as \\ud800)"),
        ({"a": "x" * 17}, "a", "is 17 characters long; at most 16 are allowed"),
        ({"k\x00": 1}, "", "a key must not contain NUL characters (\\u0000)"),
    ],
)
def test_a_bad_string_is_named_by_its_path(document: Any, path: str, problem: str) -> None:
    with pytest.raises(DocumentError) as refused:
        check_document(document, Limits(max_string=16))
    assert (refused.value.path, refused.value.problem) == (path, problem)


def test_a_paired_surrogate_is_text() -> None:
    check_document({"emoji": "\U0001f600"})


def test_printable_replaces_controls_and_cuts() -> None:
    assert printable("a\x1b[2Jb\x00c\td\ud800", 100) == "a\ufffd[2Jb\ufffdc\td\ufffd"
    assert printable("abcdef", 4) == "abc…"
