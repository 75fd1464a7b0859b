"""Limits on a parsed document (a JSON request body, a YAML file): how deep it nests, how many
values it holds, how long its strings are, and which characters they may carry.

A document is what `json.loads` or `yaml.safe_load` returns: dicts, lists, strings, numbers,
booleans and None. YAML aliases can make one object appear many times (the "billion laughs"),
so values are counted as they would be written out, and the walk stops at the first limit it
meets: it never does more than `max_values` steps.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_DEPTH = 32
"""The deepest nesting of mappings and lists a document may have (an actor template needs 6)."""

MAX_VALUES = 100_000
"""The most values (mappings, lists, keys and scalars, aliases counted each time) in a document."""

MAX_STRING = 16 * 1024
"""The longest string (in characters) a document may hold, a key or a value."""


class DocumentError(ValueError):
    """A document breaks a limit; `path` names where (`spec.containers[0].env.A`, empty for the
    whole document) and the message says what is allowed."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path
        self.problem = problem


@dataclass(frozen=True)
class Limits:
    """The limits `check_document` applies (defaults: the module's constants)."""

    max_depth: int = MAX_DEPTH
    max_values: int = MAX_VALUES
    max_string: int = MAX_STRING


def _key_path(path: str, key: object) -> str:
    text = str(key)
    text = text if len(text) <= 64 else text[:63] + "…"
    return f"{path}.{text}" if path else text


def text_problem(value: str, max_string: int = MAX_STRING) -> str | None:
    """What is wrong with a string of a document, or None: too long, a NUL character, or a lone
    UTF-16 surrogate (JSON's `\\ud800`), which no UTF-8 store or file can hold."""
    if len(value) > max_string:
        return f"is {len(value)} characters long; at most {max_string} are allowed"
    if "\x00" in value:
        return "must not contain NUL characters (\\u0000)"
    if any("\ud800" <= c <= "\udfff" for c in value):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "must be valid Unicode text (it holds a lone surrogate such as \\ud800)"
    return None


def check_document(document: object, limits: Limits = Limits(), path: str = "") -> None:
    """Check a parsed document against `limits`, without recursion (no depth can overflow it).

    Args:
        document: The parsed document.
        limits: The limits.
        path: How to name the document's root in messages ("" for none).

    Raises:
        DocumentError: The first limit broken, with the path of the value that broke it.
    """
    stack: list[tuple[str, object, int]] = [(path, document, 0)]
    counted = 1
    while stack:
        where, value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth >= limits.max_depth:
                raise DocumentError(where, f"nests deeper than {limits.max_depth} levels")
            counted += len(value)
            if counted > limits.max_values:
                raise DocumentError(
                    path, f"holds more than {limits.max_values} values (YAML aliases count each time they are used)"
                )
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and (problem := text_problem(key, limits.max_string)):
                    raise DocumentError(where, f"a key {problem}")
                stack.append((_key_path(where, key), item, depth + 1))
        elif isinstance(value, list):
            stack.extend((f"{where}[{index}]", item, depth + 1) for index, item in enumerate(value))
        elif isinstance(value, str) and (problem := text_problem(value, limits.max_string)):
            raise DocumentError(where, problem)


def printable(value: str, limit: int) -> str:
    """`value` made safe to store and to print on a terminal: every control character (but tab),
    NUL and lone surrogate becomes U+FFFD, and it is cut to `limit` characters (an ellipsis
    last). For text that only passes through, such as a sandbox's last log line in an exit
    reason, where refusing the whole report would lose it."""
    cleaned = "".join(
        "\ufffd" if (not c.isprintable() and c != "\t") or "\ud800" <= c <= "\udfff" else c for c in value
    )
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"
