"""The shared printer: kubectl-style plain tables, JSON and YAML for every resource.

Table rows are built by one function per resource (`actor_row`, `worker_row`, ...), so the
columns live in one place; `human_age` renders AGE the way kubectl does.
"""

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import typer
import yaml

NONE = "<none>"
REASON_WIDTH = 60
"""Characters of a template's failure reason shown in a list (one line; `…` marks a cut)."""


class OutputFormat(StrEnum):
    """Values of `-o/--output`."""

    table = "table"
    json = "json"
    yaml = "yaml"


ACTOR_COLUMNS = ("ATESPACE", "NAME", "TEMPLATE", "STATE", "WORKER POD", "WORKER IPS", "VERSION", "AGE")
WORKER_COLUMNS = ("POOL", "WORKER", "NODE", "IP", "STATE", "ACTORS", "REASON")
TEMPLATE_COLUMNS = ("ATESPACE", "NAME", "PHASE", "SANDBOX CLASS", "AGE", "REASON")
ATESPACE_COLUMNS = ("NAME", "AGE")


def parse_time(value: Any) -> datetime | None:
    """Parse an RFC 3339 / ISO 8601 timestamp; naive times are taken as UTC.

    Args:
        value: The timestamp string, or anything else (gives None).

    Returns:
        An aware datetime, or None when the value is missing or malformed.
    """
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def human_duration(seconds: float) -> str:
    """Render a duration the way kubectl's AGE column does.

    Two significant units while they matter (`90s`, `3m20s`, `5h30m`, `2d4h`), one after
    (`45m`, `30h`, `12d`, `3y`).

    Args:
        seconds: The duration in seconds.

    Returns:
        The short form, `0s` for a negative duration within a second, `<invalid>` below that.
    """
    if seconds < -1:
        return "<invalid>"
    s = max(int(seconds), 0)
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        days, rest = divmod(hours, 24)
        return f"{days}d{rest}h" if rest else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years, rest = divmod(hours // 24, 365)
        return f"{years}y{rest}d" if rest else f"{years}y"
    return f"{hours // (24 * 365)}y"


def human_age(created_at: Any, now: datetime | None = None) -> str:
    """AGE of a resource from its `created_at`.

    Args:
        created_at: The resource's creation timestamp (string).
        now: The current time; defaults to now in UTC.

    Returns:
        The kubectl-style age, or `<unknown>` when the timestamp is missing.
    """
    created = parse_time(created_at)
    if created is None:
        return "<unknown>"
    return human_duration(((now or datetime.now(UTC)) - created).total_seconds())


def _text(value: Any) -> str:
    """A cell's text: `<none>` for missing values."""
    if value is None or value == "":
        return NONE
    return str(value)


def actor_row(actor: dict[str, Any], now: datetime | None = None) -> list[str]:
    """One row of ACTOR_COLUMNS."""
    worker = actor.get("worker") or {}
    return [
        _text(actor.get("atespace")),
        _text(actor.get("name")),
        _text(actor.get("template")),
        _text(actor.get("state")),
        _text(worker.get("name")),
        _text(worker.get("ip")),
        _text(actor.get("version")),
        human_age(actor.get("created_at"), now),
    ]


def worker_row(worker: dict[str, Any], now: datetime | None = None) -> list[str]:
    """One row of WORKER_COLUMNS; ACTORS is `<actors placed>/<places>`; REASON says why an
    UNAVAILABLE worker takes no actor (cut to REASON_WIDTH)."""
    actors = worker.get("actors")
    count = len(actors) if isinstance(actors, list) else worker.get("used_places", 0)
    reason = worker.get("state_reason")
    return [
        _text(worker.get("pool")),
        _text(worker.get("name")),
        _text(worker.get("node")),
        _text(worker.get("ip")),
        _text(worker.get("state")),
        f"{count}/{worker.get('places', 0)}",
        one_line(str(reason), REASON_WIDTH) if reason else NONE,
    ]


def template_sandbox_class(spec: Any) -> str:
    """The sandbox class named by a template spec."""
    if not isinstance(spec, dict):
        return NONE
    return _text(spec.get("sandboxClass") or spec.get("sandbox_class"))


def one_line(text: str, width: int | None = None) -> str:
    """`text` on one line (whitespace runs collapsed), cut to `width` characters with `…`."""
    flat = " ".join(text.split())
    if width is not None and len(flat) > width:
        return flat[: width - 1].rstrip() + "…"
    return flat


def template_row(template: dict[str, Any], now: datetime | None = None, *, full: bool = False) -> list[str]:
    """One row of TEMPLATE_COLUMNS; the REASON is cut to REASON_WIDTH unless `full`."""
    reason = template.get("reason")
    return [
        _text(template.get("atespace")),
        _text(template.get("name")),
        _text(template.get("phase")),
        template_sandbox_class(template.get("spec")),
        human_age(template.get("created_at"), now),
        one_line(str(reason), None if full else REASON_WIDTH) if reason else NONE,
    ]


def template_row_full(template: dict[str, Any], now: datetime | None = None) -> list[str]:
    """One row of TEMPLATE_COLUMNS with the whole REASON (for a single template)."""
    return template_row(template, now, full=True)


def atespace_row(atespace: dict[str, Any], now: datetime | None = None) -> list[str]:
    """One row of ATESPACE_COLUMNS."""
    return [_text(atespace.get("name")), human_age(atespace.get("created_at"), now)]


def format_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Align columns like kubectl: left-aligned, three spaces apart, no borders.

    Args:
        columns: Header cells.
        rows: Body rows, each as long as `columns`.

    Returns:
        The table, one line per row, without a trailing newline.
    """
    widths = [len(c) for c in columns]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = []
    for row in [list(columns), *rows]:
        cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=True)]
        lines.append("   ".join(cells).rstrip())
    return "\n".join(lines)


def render(
    data: Any,
    fmt: OutputFormat,
    *,
    columns: Sequence[str],
    row: Callable[[dict[str, Any], datetime | None], list[str]],
    now: datetime | None = None,
) -> str:
    """Render one resource or a list of them.

    Args:
        data: One resource (dict) or a list of resources.
        fmt: table, json or yaml.
        columns: Table header.
        row: Builds one table row from a resource.
        now: The time AGE is measured against.

    Returns:
        The text to print. A list renders as `{"items": [...]}` in JSON and YAML.
    """
    if fmt is OutputFormat.json:
        payload = {"items": data} if isinstance(data, list) else data
        return json.dumps(payload, indent=2, sort_keys=False)
    if fmt is OutputFormat.yaml:
        payload = {"items": data} if isinstance(data, list) else data
        return yaml.safe_dump(payload, sort_keys=False, default_flow_style=False).rstrip("\n")
    items = data if isinstance(data, list) else [data]
    return format_table(columns, [row(item, now) for item in items])


def echo_resources(
    data: Any,
    fmt: OutputFormat,
    *,
    columns: Sequence[str],
    row: Callable[[dict[str, Any], datetime | None], list[str]],
    empty: str = "No resources found.",
) -> None:
    """Print resources; an empty list in table form prints `empty` to stderr, like kubectl."""
    if fmt is OutputFormat.table and isinstance(data, list) and not data:
        typer.echo(empty, err=True)
        return
    typer.echo(render(data, fmt, columns=columns, row=row))


def print_actors(data: Any, fmt: OutputFormat, empty: str = "No actors found.") -> None:
    """Print one actor or a list of actors."""
    echo_resources(data, fmt, columns=ACTOR_COLUMNS, row=actor_row, empty=empty)


def print_workers(data: Any, fmt: OutputFormat) -> None:
    """Print workers."""
    echo_resources(data, fmt, columns=WORKER_COLUMNS, row=worker_row, empty="No workers found.")


def print_templates(data: Any, fmt: OutputFormat, empty: str = "No templates found.") -> None:
    """Print one template (with its whole failure reason) or a list of templates (reasons cut)."""
    row = template_row if isinstance(data, list) else template_row_full
    echo_resources(data, fmt, columns=TEMPLATE_COLUMNS, row=row, empty=empty)


def print_atespaces(data: Any, fmt: OutputFormat) -> None:
    """Print one atespace or a list of atespaces."""
    echo_resources(data, fmt, columns=ATESPACE_COLUMNS, row=atespace_row, empty="No atespaces found.")


TAG_COLUMNS = ("ATESPACE", "TAG", "ACTOR", "GENERATION", "SCOPE", "AGE")
OPERATIONS_COLUMNS = ("ATESPACE", "ACTOR", "OPERATION", "STEP", "AGE")


def tag_row(tag: dict[str, Any], now: datetime | None = None) -> list[str]:
    """One row of TAG_COLUMNS."""
    return [
        _text(tag.get("atespace")), _text(tag.get("name")), _text(tag.get("source_actor")),
        _text(tag.get("generation")), _text(tag.get("scope")), human_age(tag.get("created_at"), now),
    ]  # fmt: skip


def operation_in_flight_row(operation: dict[str, Any], now: datetime | None = None) -> list[str]:
    """One row of OPERATIONS_COLUMNS (STEP is the workflow's current step, as the Temporal UI shows)."""
    step = str(operation.get("step") or "").removeprefix("step: ")
    return [
        _text(operation.get("atespace")), _text(operation.get("actor")), _text(operation.get("operation")),
        _text(step or None), human_age(operation.get("started_at"), now),
    ]  # fmt: skip


def print_tags(data: Any, fmt: OutputFormat) -> None:
    """Print one tag or a list of tags."""
    echo_resources(data, fmt, columns=TAG_COLUMNS, row=tag_row, empty="No tags found.")


def print_operations(data: Any, fmt: OutputFormat) -> None:
    """Print operations in flight."""
    echo_resources(data, fmt, columns=OPERATIONS_COLUMNS, row=operation_in_flight_row, empty="No operations in flight.")


TOKEN_COLUMNS = ("ID", "NAME", "GRANTS", "CREATED-BY", "AGE", "EXPIRES")


def token_row(token: dict[str, Any], now: datetime | None = None) -> list[str]:
    """One row of TOKEN_COLUMNS (EXPIRES: the time left, or `never`)."""
    expires = parse_time(token.get("expires_at"))
    left = "never"
    if expires is not None:
        seconds = (expires - (now or datetime.now(UTC))).total_seconds()
        left = human_duration(seconds) if seconds > 0 else "expired"
    return [
        _text(token.get("token_id")), _text(token.get("name")), ",".join(token.get("grants") or []) or "<none>",
        _text(token.get("created_by")), human_age(token.get("created_at"), now), left,
    ]  # fmt: skip


def print_tokens(data: Any, fmt: OutputFormat) -> None:
    """Print tokens (never their secrets: the API does not keep them)."""
    echo_resources(data, fmt, columns=TOKEN_COLUMNS, row=token_row, empty="No tokens found.")


SECRET_COLUMNS = ("NAME", "TYPE", "SIZE", "KEY", "CREATED-BY", "AGE")


def secret_row(secret: dict[str, Any], now: datetime | None = None) -> list[str]:
    """One row of SECRET_COLUMNS (TYPE: `opaque`, or `registry/<host[:port]>`; SIZE: the value's
    bytes; KEY: the key of the ring that sealed it)."""
    kind = _text(secret.get("type") or "opaque")
    if secret.get("registry"):
        kind += f"/{secret['registry']}"
    return [
        _text(secret.get("name")), kind, f"{secret.get('size_bytes')} B", _text(secret.get("key_id")),
        _text(secret.get("created_by")), human_age(secret.get("created_at"), now),
    ]  # fmt: skip


def print_secrets(data: Any, fmt: OutputFormat) -> None:
    """Print secrets (names and metadata: the API never returns a value)."""
    echo_resources(data, fmt, columns=SECRET_COLUMNS, row=secret_row, empty="No secrets found.")


SNAPSHOT_COLUMNS = ("ID", "OWNER", "GEN", "SCOPE", "STATE", "SIZE", "WHERE", "KEPT-BY", "AGE")


def human_bytes(count: Any) -> str:
    """A size the way `ls -h` reads: `512B`, `3.3Mi`, `1.2Gi` ('-' when unknown)."""
    if count is None:
        return "-"
    value = float(count)
    for unit in ("B", "Ki", "Mi", "Gi", "Ti"):
        if value < 1024 or unit == "Ti":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{value:.1f}Ti"


def snapshot_row(snapshot: dict[str, Any], now: datetime | None = None) -> list[str]:
    """One row of SNAPSHOT_COLUMNS (OWNER: `actor/NAME` or `template/NAME`; WHERE: `node N` for a
    local snapshot, else `store`; KEPT-BY: what keeps it, one word each (`tag:NAME`, `awaiting:upload`),
    `-` for nothing: the collector's)."""
    where = f"node {snapshot.get('node')}" if snapshot.get("storage") == "LOCAL" else "store"
    return [
        _text(snapshot.get("id")), f"{snapshot.get('owner_kind')}/{snapshot.get('owner')}",
        _text(snapshot.get("generation")), _text(snapshot.get("scope")), _text(snapshot.get("state")),
        human_bytes(snapshot.get("size_bytes")), where,
        ",".join(str(k).replace(" ", ":") for k in snapshot.get("kept_by") or []) or "-",
        human_age(snapshot.get("created_at"), now),
    ]  # fmt: skip


def print_snapshots(data: Any, fmt: OutputFormat) -> None:
    """Print one snapshot or a list of snapshots."""
    echo_resources(data, fmt, columns=SNAPSHOT_COLUMNS, row=snapshot_row, empty="No snapshots found.")


SCHEDULE_COLUMNS = ("NAME", "ACTOR", "WHEN", "TIME ZONE", "PATH", "CATCHUP", "NEXT", "WAKES")


def schedule_row(schedule: dict[str, Any], _now: datetime | None = None) -> list[str]:
    """One row of SCHEDULE_COLUMNS (WHEN: the cron expression, or `every N s`)."""
    when = schedule.get("cron") or f"every {schedule.get('every_seconds')} s"
    following = schedule.get("next_times") or []
    return [
        str(schedule.get("name")),
        str(schedule.get("actor")),
        str(when) + (" (paused)" if schedule.get("paused") else ""),
        str(schedule.get("time_zone")),
        str(schedule.get("path")),
        str(schedule.get("catchup")),
        str(following[0]) if following else "-",
        str(schedule.get("recent_wakes", 0)),
    ]


def print_schedules(data: Any, fmt: OutputFormat) -> None:
    """Print one schedule or a list of schedules."""
    echo_resources(data, fmt, columns=SCHEDULE_COLUMNS, row=schedule_row, empty="No schedules found.")
