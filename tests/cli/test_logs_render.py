"""How `ate logs` prints the API's records (ate/cli/logs.py): a line as it is, an event as
`[ate] <event>`, and with --timestamps the time first, in this machine's zone."""

from __future__ import annotations

from datetime import datetime

from ate.cli.logs import render


def test_lines_and_events_print_as_written() -> None:
    line = {"type": "line", "time": "2026-12-07T10:00:00.123456+00:00", "line": "counted: memory_count 1"}
    event = {"type": "event", "time": "2026-12-07T10:00:01+00:00", "event": "suspended: idle for 300 s"}
    assert render(line, timestamps=False) == "counted: memory_count 1"
    assert render(event, timestamps=False) == "[ate] suspended: idle for 300 s"
    stamp, text = render(line, timestamps=True).split(" ", 1)
    assert text == "counted: memory_count 1"
    assert datetime.fromisoformat(stamp) == datetime.fromisoformat("2026-12-07T10:00:00.123+00:00")
