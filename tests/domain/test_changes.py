"""The NOTIFY payloads of domain.changes, read as the migrations' trigger and the drain query write
them (store/migrations/0001_initial.sql: `atespace || '/' || name || ' ' || state`)."""

import re
from pathlib import Path

from domain.changes import (
    ACTOR_CHANGES_CHANNEL,
    ROUTER_DRAINS_CHANNEL,
    WORKER_CHANGES_CHANNEL,
    ActorChange,
    DrainNotice,
    format_drain,
    parse_actor_change,
    parse_drain,
    parse_drain_notice,
)
from domain.refs import ActorRef


def test_an_actor_change_names_the_actor_and_its_state() -> None:
    assert parse_actor_change("demo/c1 RUNNING") == ActorChange(ActorRef("demo", "c1"), "RUNNING")
    assert parse_actor_change(" demo/c1 DELETED\n") == ActorChange(ActorRef("demo", "c1"), "DELETED")


def test_a_payload_that_names_no_actor_is_none() -> None:
    for payload in ("", "RUNNING", "demo RUNNING", "/c1 RUNNING", "demo/ RUNNING"):
        assert parse_actor_change(payload) is None, payload


def test_a_drain_payload_goes_there_and_back() -> None:
    actor = ActorRef("demo", "c1")
    assert format_drain(7, actor) == "7 demo/c1"
    assert parse_drain("7 demo/c1") == (7, actor)
    for payload in ("x demo/c1", "7", "7 demo", "7 /c1", "-1 demo/c1"):
        assert parse_drain(payload) is None, payload


def test_an_idle_drain_payload_goes_there_and_back_and_an_old_reader_ignores_it() -> None:
    actor = ActorRef("demo", "c1")
    assert format_drain(7, actor, if_idle=True) == "7:idle demo/c1"
    assert parse_drain_notice("7:idle demo/c1") == DrainNotice(7, actor, True)
    assert parse_drain_notice("7 demo/c1") == DrainNotice(7, actor, False)
    assert parse_drain("7:idle demo/c1") == (7, actor)
    old_id = "7:idle demo/c1".partition(" ")[0]
    assert not old_id.isdigit()  # the parser from before the mark finds the payload unparsable
    for payload in ("7:busy demo/c1", "7 demo/c1 idle", ":idle demo/c1"):
        assert parse_drain_notice(payload) is None, payload


def test_every_channel_the_sql_notifies_is_one_of_domain_changes() -> None:
    # The triggers (migrations) and the drain query are SQL and cannot import the constants: this
    # keeps their spellings of the channels the one of domain.changes.
    store = Path(__file__).resolve().parents[2] / "store"
    sql = "".join(path.read_text() for path in [store / "queries.sql", *sorted((store / "migrations").glob("*.sql"))])
    notified = set(re.findall(r"pg_notify\('([a-z_]+)'", sql))
    assert notified == {ACTOR_CHANGES_CHANNEL, ROUTER_DRAINS_CHANNEL, WORKER_CHANGES_CHANNEL}
