"""domain/logs.py: `--since` durations, sandbox bytes made storable, and the words of lifecycle events."""

from __future__ import annotations

import pytest

from domain.logs import LifecycleEvent, clean_text, parse_since


def test_since_takes_a_number_and_a_unit() -> None:
    assert [parse_since(t) for t in ("30s", "10m", "2h", "1d", "1.5h")] == [30, 600, 7200, 86400, 5400]
    for bad in ("10", "m", "-5m", "0s", "10 m", "10M", "1w", ""):
        with pytest.raises(ValueError, match=r"since: .* is not a duration"):
            parse_since(bad)


def test_sandbox_bytes_become_text_a_database_takes() -> None:
    assert clean_text(b"ok\r") == "ok"
    assert clean_text(b"nul\x00 and \xff") == "nul\ufffd and \ufffd"


def test_events_say_what_happened() -> None:
    assert LifecycleEvent("ResumeActor", "ok", "default/default-0").text() == "resumed on default/default-0"
    assert LifecycleEvent("SuspendActor", "ok", None, "idle for 300 s").text() == "suspended: idle for 300 s"
    assert LifecycleEvent("SuspendActor", "abandoned").text() == "SuspendActor abandoned"
    assert LifecycleEvent("ResumeActor", "failed", error="no worker has room").text() == \
        "ResumeActor failed: no worker has room"  # fmt: skip
    assert LifecycleEvent("ExecInActor", "exit 0", reason="by alice: ls").text() == "exec by alice: ls: exit 0"
    assert LifecycleEvent("NodeLost", "ok").text() == "NodeLost"
