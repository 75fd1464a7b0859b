"""The shared printer: AGE, table columns, JSON and YAML."""

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from ate.cli.output import (
    ACTOR_COLUMNS,
    ATESPACE_COLUMNS,
    TEMPLATE_COLUMNS,
    WORKER_COLUMNS,
    OutputFormat,
    actor_row,
    atespace_row,
    format_table,
    human_age,
    human_duration,
    render,
    template_row,
    template_row_full,
    worker_row,
)

NOW = datetime(2026, 3, 10, 12, 0, 0, tzinfo=UTC)


def ago(**delta: float) -> str:
    """An RFC 3339 timestamp `delta` before NOW."""
    return (NOW - timedelta(**delta)).isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize(
    ("created_at", "age"),
    [
        ("2026-03-10T11:59:55Z", "5s"),  # 5 s
        ("2026-03-10T12:00:00Z", "0s"),
        ("2026-03-10T12:00:00.900Z", "0s"),  # a clock a little ahead
        ("2026-03-10T12:00:05Z", "<invalid>"),  # far in the future
        ("2026-03-10T11:58:01Z", "119s"),  # 119 s: seconds until two minutes
        ("2026-03-10T11:57:00Z", "3m"),  # 180 s
        ("2026-03-10T11:56:40Z", "3m20s"),  # 200 s
        ("2026-03-10T11:45:00Z", "15m"),  # 15 min
        ("2026-03-10T10:00:00Z", "120m"),  # 2 h: kubectl keeps minutes below 3 h
        ("2026-03-10T09:00:00Z", "3h"),  # 3 h
        ("2026-03-10T06:30:00Z", "5h30m"),  # 5.5 h
        ("2026-03-09T14:00:00Z", "22h"),  # 22 h
        ("2026-03-06T12:00:00Z", "4d"),  # 96 h
        ("2026-03-08T06:00:00Z", "2d6h"),  # 54 h
        ("2026-01-09T12:00:00Z", "60d"),  # 60 days
        ("2023-03-10T12:00:00Z", "3y1d"),  # 1096 days, 2024 was a leap year
        ("2016-03-10T12:00:00Z", "10y"),
        ("2026-03-10T13:00:00+01:00", "0s"),  # same instant, another zone
        ("2026-03-10T11:59:50", "10s"),  # naive: taken as UTC
    ],
)
def test_human_age(created_at: str, age: str) -> None:
    assert human_age(created_at, NOW) == age


def test_human_age_missing() -> None:
    assert human_age(None, NOW) == "<unknown>"
    assert human_age("yesterday", NOW) == "<unknown>"


def test_human_duration_boundaries() -> None:
    assert human_duration(119.9) == "119s"
    assert human_duration(120) == "2m"
    assert human_duration(599) == "9m59s"
    assert human_duration(600) == "10m"
    assert human_duration(3 * 3600 - 1) == "179m"
    assert human_duration(8 * 3600) == "8h"
    assert human_duration(48 * 3600) == "2d"


def split_columns(line: str) -> list[str]:
    """Cells of a table line: separated by at least two spaces (headers contain one)."""
    return re.split(r" {2,}", line.strip())


ACTOR = {
    "atespace": "demo",
    "name": "c1",
    "template": "counter",
    "state": "RUNNING",
    "version": 4,
    "worker_selector": {},
    "worker": {"pool": "default", "name": "vm-w-1", "node": "vm", "ip": "10.77.0.3"},
    "latest_snapshot": None,
    "created_at": "2026-03-10T11:57:00Z",
    "updated_at": "2026-03-10T11:59:00Z",
}
SUSPENDED = {
    **ACTOR,
    "name": "counter-two",
    "state": "SUSPENDED",
    "worker": None,
    "version": 1,
    "created_at": "2026-03-06T12:00:00Z",
}


def test_actor_table_columns_exact() -> None:
    text = render([ACTOR, SUSPENDED], OutputFormat.table, columns=ACTOR_COLUMNS, row=actor_row, now=NOW)
    lines = text.splitlines()
    assert lines[0].split() == [
        "ATESPACE",
        "NAME",
        "TEMPLATE",
        "STATE",
        "WORKER",
        "POD",
        "WORKER",
        "IPS",
        "VERSION",
        "AGE",
    ]
    assert split_columns(lines[0]) == list(ACTOR_COLUMNS)
    assert split_columns(lines[1]) == ["demo", "c1", "counter", "RUNNING", "vm-w-1", "10.77.0.3", "4", "3m"]
    assert split_columns(lines[2]) == ["demo", "counter-two", "counter", "SUSPENDED", "<none>", "<none>", "1", "4d"]
    # Plain aligned columns, no borders: every column starts at the same offset on every line.
    for header in ACTOR_COLUMNS:
        offset = lines[0].index(header)
        assert all(line[offset - 1] == " " for line in lines[1:] if offset > 0)
    assert "|" not in text and "─" not in text and "│" not in text


def test_table_alignment_is_kubectl_like() -> None:
    assert format_table(["NAME", "AGE"], [["a", "5s"], ["longer-name", "3m"]]) == (
        "NAME          AGE\na             5s\nlonger-name   3m"
    )


def test_worker_table() -> None:
    worker = {
        "pool": "default",
        "name": "vm-w-0",
        "node": "vm",
        "ip": "10.77.0.2",
        "sandbox_class": "gvisor",
        "labels": {},
        "state": "ACTIVE",
        "places": 1,
        "used_places": 1,
        "cpu_millis": 1000,
        "memory_bytes": 1 << 30,
        "actors": ["demo/c1"],
    }
    idle = {**worker, "name": "vm-w-1", "ip": "10.77.0.3", "used_places": 0, "actors": [], "places": 4}
    held = {
        **idle, "name": "vm-w-2", "ip": "10.77.0.4", "places": 1, "state": "UNAVAILABLE",
        "state_reason": "held until every router replica has drained demo/c9 (its sandbox crashed on this worker)",
    }  # fmt: skip
    lines = render(
        [worker, idle, held], OutputFormat.table, columns=WORKER_COLUMNS, row=worker_row, now=NOW
    ).splitlines()
    assert split_columns(lines[0]) == ["POOL", "WORKER", "NODE", "IP", "STATE", "ACTORS", "REASON"]
    assert split_columns(lines[1]) == ["default", "vm-w-0", "vm", "10.77.0.2", "ACTIVE", "1/1", "<none>"]
    assert split_columns(lines[2]) == ["default", "vm-w-1", "vm", "10.77.0.3", "ACTIVE", "0/4", "<none>"]
    # The reason, cut to 60 characters (59 and an ellipsis), as a template's REASON is.
    assert split_columns(lines[3]) == [
        "default", "vm-w-2", "vm", "10.77.0.4", "UNAVAILABLE", "0/1",
        "held until every router replica has drained demo/c9 (its sa…",
    ]  # fmt: skip


READY_TEMPLATE = {
    "atespace": "demo",
    "name": "counter",
    "spec": {"sandboxClass": "gvisor"},
    "phase": "Ready",
    "reason": None,
    "golden_snapshot": None,
    "created_at": "2026-03-10T09:00:00Z",
}


def test_template_table_shows_failure_reason_last() -> None:
    failed = {**READY_TEMPLATE, "name": "broken", "phase": "Failed", "reason": "image not found: nope"}
    lines = render(
        [READY_TEMPLATE, failed], OutputFormat.table, columns=TEMPLATE_COLUMNS, row=template_row, now=NOW
    ).splitlines()
    assert split_columns(lines[0]) == ["ATESPACE", "NAME", "PHASE", "SANDBOX CLASS", "AGE", "REASON"]
    assert split_columns(lines[1]) == ["demo", "counter", "Ready", "gvisor", "3h", "<none>"]
    assert split_columns(lines[2]) == ["demo", "broken", "Failed", "gvisor", "3h", "image not found: nope"]


LONG_REASON = (
    "golden snapshot failed: runsc run failed (exit 128): container init failed:\n"
    "  starting container: error loading image oci:examples/counter/oci:latest: no such tag; "
    "see /work/.ate/atelet/logs/demo/counter.log for the full log of the boot"
)


def test_a_long_reason_is_cut_in_lists_and_whole_for_one_template() -> None:
    failed = {**READY_TEMPLATE, "phase": "Failed", "reason": LONG_REASON}
    lines = render([READY_TEMPLATE, failed], OutputFormat.table, columns=TEMPLATE_COLUMNS, row=template_row, now=NOW)
    row = lines.splitlines()[2]
    cells = split_columns(row)
    assert cells[2] == "Failed"
    # Columns before REASON stay as narrow as their longest short value.
    assert lines.splitlines()[0].index("REASON") == row.index("golden")
    reason = cells[5]
    assert len(reason) == 60 and reason.endswith("…")
    assert reason == "golden snapshot failed: runsc run failed (exit 128): contai…"

    whole = render(failed, OutputFormat.table, columns=TEMPLATE_COLUMNS, row=template_row_full, now=NOW)
    assert whole.splitlines()[1].endswith("see /work/.ate/atelet/logs/demo/counter.log for the full log of the boot")
    assert len(whole.splitlines()) == 2
    assert json.loads(render(failed, OutputFormat.json, columns=TEMPLATE_COLUMNS, row=template_row))["reason"] == (
        LONG_REASON
    )


def test_atespace_table() -> None:
    text = render(
        {"name": "demo", "created_at": ago(seconds=42)},
        OutputFormat.table,
        columns=ATESPACE_COLUMNS,
        row=atespace_row,
        now=NOW,
    )
    assert text.splitlines() == ["NAME   AGE", "demo   42s"]


def test_json_and_yaml_keep_the_api_objects() -> None:
    one_json = json.loads(render(ACTOR, OutputFormat.json, columns=ACTOR_COLUMNS, row=actor_row))
    assert one_json == ACTOR
    many_json = json.loads(render([ACTOR, SUSPENDED], OutputFormat.json, columns=ACTOR_COLUMNS, row=actor_row))
    assert many_json == {"items": [ACTOR, SUSPENDED]}
    one_yaml = yaml.safe_load(render(ACTOR, OutputFormat.yaml, columns=ACTOR_COLUMNS, row=actor_row))
    assert one_yaml == ACTOR
    many_yaml = yaml.safe_load(render([ACTOR], OutputFormat.yaml, columns=ACTOR_COLUMNS, row=actor_row))
    assert many_yaml == {"items": [ACTOR]}
