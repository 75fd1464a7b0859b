"""The local endpoint's rules for what an actor may ask (domain.local_endpoint), read from the
issue: a wake with exactly one of a delay and a time, in the future and
within 366 days, a DNS-1123 name and a request path; each refusal names its field."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from domain.local_endpoint import LocalEndpointError, check_wake, self_suspend_reason
from domain.refs import ActorRef

NOW = datetime(2026, 12, 4, 21, 0, tzinfo=UTC)
ME = ActorRef("demo", "agent-7")


def test_a_wake_after_a_delay_is_due_that_many_seconds_from_now() -> None:
    wake = check_wake(ME, "tick", after_seconds=90, path="/poll?x=1", now=NOW)
    assert (wake.at, wake.path, wake.workflow_id) == (
        datetime(2026, 12, 4, 21, 1, 30, tzinfo=UTC), "/poll?x=1", "asked-wake/demo/agent-7/tick",
    )  # fmt: skip
    assert wake.reason == "asked by the actor (wake tick)"


def test_a_wake_at_a_time_in_another_zone_is_kept_in_utc() -> None:
    wake = check_wake(ME, "tick", at="2026-12-05T09:00:00+09:00", now=NOW)
    assert wake.at == datetime(2026, 12, 5, 0, 0, tzinfo=UTC) and wake.at.tzinfo == UTC


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"after_seconds": 0}, "after_seconds"),
        ({"after_seconds": -5}, "after_seconds"),
        ({"after_seconds": True}, "after_seconds"),
        ({"after_seconds": 366 * 24 * 3600 + 1}, "after_seconds"),
        ({}, "after_seconds"),
        ({"after_seconds": 5, "at": "2026-12-05T00:00:00Z"}, "after_seconds"),
        ({"at": "2026-12-04T20:59:59Z"}, "at"),
        ({"at": "2026-12-05T00:00:00"}, "at"),  # no zone: whose midnight?
        ({"at": "tomorrow"}, "at"),
        ({"at": "2028-01-01T00:00:00Z"}, "at"),
        ({"after_seconds": 5, "path": "poll"}, "path"),
        ({"after_seconds": 5, "path": "/a b"}, "path"),
        ({"after_seconds": 5, "path": "/a\r\nHost: x"}, "path"),
    ],
)
def test_bad_wakes_are_refused_naming_the_field(fields: dict[str, object], field: str) -> None:
    with pytest.raises(LocalEndpointError) as refused:
        check_wake(ME, "tick", now=NOW, **fields)  # type: ignore[arg-type]
    assert refused.value.field == field


@pytest.mark.parametrize("name", ["", "Tick", "-tick", "t" * 64, 7])
def test_a_wake_name_is_a_dns_label(name: object) -> None:
    with pytest.raises(LocalEndpointError) as refused:
        check_wake(ME, name, after_seconds=5, now=NOW)
    assert refused.value.field == "name"


def test_the_reason_says_the_actor_asked_and_its_linger() -> None:
    assert self_suspend_reason(0) == "asked by the actor"
    assert self_suspend_reason(3) == "asked by the actor (linger 3 s)"
