"""Schedules through the REST API on a real Temporal server (issue 27): made as Temporal Schedules
that start WakeActor, listed with their next times, refused naming the field when wrong, deleted
alone or with their actor. No Temporal worker runs here: the wakes themselves are the e2e test's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from temporalio.client import Client, ScheduleActionStartWorkflow

A = "/v1/atespaces/sched/actors"
CONTAINERS = [{"name": "app", "image": "oci:app:v1", "port": 8080}]


@pytest.fixture(scope="module")
async def actors(api_server: Any) -> AsyncIterator[None]:
    from tests.credentials import SuiteCredentials

    async with httpx.AsyncClient(base_url=api_server.url, auth=SuiteCredentials(), timeout=30) as http:
        assert (await http.post("/v1/atespaces", json={"name": "sched"})).status_code == 201
        template = {"name": "t", "spec": {"containers": CONTAINERS}}
        assert (await http.post("/v1/atespaces/sched/templates", json=template)).status_code == 201
        for name in ("s1", "s2", "gone"):
            assert (await http.post(A, json={"name": name, "template": "t"})).status_code == 201
    yield


async def test_a_schedule_is_a_temporal_schedule_that_wakes_the_actor(
    api: httpx.AsyncClient, actors: None, temporal_address: str
) -> None:
    made = await api.post(f"{A}/s1/schedules", json={"name": "tick", "every_seconds": 30, "path": "/tick?x=1"})
    assert made.status_code == 201, made.text
    body = made.json()
    assert (body["name"], body["actor"], body["every_seconds"], body["cron"]) == ("tick", "sched/s1", 30, None)
    assert (body["path"], body["catchup"], body["paused"], body["time_zone"]) == ("/tick?x=1", "Skip", False, "UTC")
    assert len(body["next_times"]) == 3
    temporal = await Client.connect(temporal_address)
    described = await temporal.get_schedule_handle("schedule/sched/s1/tick").describe()
    action = described.schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    assert (action.workflow, action.id) == ("WakeActor", "wake/sched/s1/tick")
    cron = await api.post(
        f"{A}/s1/schedules",
        json={"name": "daily", "cron": "30 6 * * *", "time_zone": "Europe/Paris", "catchup": "All"},
    )
    assert cron.status_code == 201, cron.text
    assert (cron.json()["cron"], cron.json()["time_zone"], cron.json()["catchup"]) == ("30 6 * * *", "Europe/Paris", "All")
    listed = (await api.get(f"{A}/s1/schedules")).json()["items"]
    assert [s["name"] for s in listed] == ["daily", "tick"]
    assert (await api.get(f"{A}/s2/schedules")).json()["items"] == []  # another actor's are not its own


async def test_bad_schedules_are_refused_naming_the_field(api: httpx.AsyncClient, actors: None) -> None:
    cases = [
        ({"name": "x"}, "cron", "give exactly one of cron"),
        ({"name": "x", "cron": "* * * * *", "every_seconds": 5}, "cron", "give exactly one of cron"),
        ({"name": "x", "cron": "every minute"}, "cron", "must be five fields"),
        ({"name": "x", "cron": "99 * * * *"}, "cron", ""),  # five fields, but Temporal cannot read minute 99
        ({"name": "x", "every_seconds": 5, "time_zone": "Mars/Olympus"}, "time_zone", "must be an IANA time zone"),
        ({"name": "x", "every_seconds": 5, "path": "tick"}, "path", "must start with '/'"),
        ({"name": "X_1", "every_seconds": 5}, "name", "is not a valid schedule name"),
    ]
    for body, field, words in cases:
        response = await api.post(f"{A}/s2/schedules", json=body)
        assert response.status_code == 400, (body, response.text)
        assert response.json()["details"]["field"] == field, response.text
        assert words in response.json()["message"]
    wrong = await api.post(f"{A}/s2/schedules", json={"name": "x", "every_seconds": 0})
    assert wrong.status_code == 400 and "every_seconds" in wrong.text
    assert (await api.get(f"{A}/s2/schedules")).json()["items"] == []  # nothing was made


async def test_a_taken_name_an_unknown_actor_and_delete(api: httpx.AsyncClient, actors: None) -> None:
    assert (await api.post(f"{A}/s2/schedules", json={"name": "once", "every_seconds": 60})).status_code == 201
    again = await api.post(f"{A}/s2/schedules", json={"name": "once", "every_seconds": 60})
    assert (again.status_code, again.json()["reason"]) == (409, "AlreadyExists")
    assert again.json()["message"] == "actor sched/s2 already has a schedule named once; delete it first"
    missing = await api.post(f"{A}/nobody/schedules", json={"name": "x", "every_seconds": 60})
    assert missing.status_code == 404
    assert (await api.delete(f"{A}/s2/schedules/once")).status_code == 204
    gone = await api.delete(f"{A}/s2/schedules/once")
    assert (gone.status_code, gone.json()["message"]) == (404, "actor sched/s2 has no schedule named once")


async def test_deleting_an_actor_deletes_its_schedules(api: httpx.AsyncClient, actors: None, temporal_address: str) -> None:
    assert (await api.post(f"{A}/gone/schedules", json={"name": "tick", "every_seconds": 60})).status_code == 201
    assert (await api.delete(f"{A}/gone")).status_code == 204
    temporal = await Client.connect(temporal_address)
    assert [s.id async for s in await temporal.list_schedules() if s.id.startswith("schedule/sched/gone/")] == []
