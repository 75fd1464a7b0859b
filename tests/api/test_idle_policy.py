"""Idle policies through the REST API (issue 27): a template's and an actor's own, what
`GET actor` says of them, the refusals that name the field and change nothing, and the idle
judge starting the due step's workflow with its reason on a real Temporal server.

Expected values come from the issue's text: `idle: {afterSeconds, action}` or a list of steps in
increasing time, actions Freeze, Pause, Suspend; an actor overrides its template's at create or
later; a step is due once the actor has been idle `afterSeconds`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from api.idle import IdleJudge
from domain.operations.freeze import FreezeActorInput
from domain.operations.suspend import SuspendActorInput
from domain.refs import ActorRef
from store import Store
from tests.api.conftest import stored_state

A = "/v1/atespaces/idle"
CONTAINERS = [{"name": "app", "image": "oci:app:v1", "port": 8080}]
TWO_STEPS = [{"afterSeconds": 20, "action": "Freeze"}, {"afterSeconds": 600, "action": "Suspend"}]


def fields_of(response: httpx.Response) -> dict[str, str]:
    body = response.json()
    return {f["field"]: f["message"] for f in body["details"]["fields"]}


@pytest.fixture(scope="module")
async def atespace(api_server: Any) -> AsyncIterator[str]:
    from tests.credentials import SuiteCredentials

    async with httpx.AsyncClient(base_url=api_server.url, auth=SuiteCredentials(), timeout=30) as http:
        assert (await http.post("/v1/atespaces", json={"name": "idle"})).status_code == 201
        template = {"name": "lazy", "spec": {"containers": CONTAINERS, "idle": TWO_STEPS, "suspendUnderPressure": True}}
        assert (await http.post(f"{A}/templates", json=template)).status_code == 201
        plain = {"name": "busy", "spec": {"containers": CONTAINERS}}
        assert (await http.post(f"{A}/templates", json=plain)).status_code == 201
    yield "idle"


async def test_a_template_keeps_its_idle_policy_and_pressure_opt_in(api: httpx.AsyncClient, atespace: str) -> None:
    spec = (await api.get(f"{A}/templates/lazy")).json()["spec"]
    assert spec["idle"] == TWO_STEPS
    assert spec["suspendUnderPressure"] is True
    assert "idle" not in (await api.get(f"{A}/templates/busy")).json()["spec"]  # off when absent


async def test_a_bad_template_policy_is_refused_naming_the_field(
    api: httpx.AsyncClient, api_store: Store, atespace: str
) -> None:
    before = await stored_state(api_store)
    cases = [
        ([{"afterSeconds": 600, "action": "Freeze"}, {"afterSeconds": 20, "action": "Suspend"}],
         "spec.idle[1].afterSeconds", "steps must be in increasing time, got 20 s after 600 s"),
        ({"afterSeconds": -5, "action": "Suspend"}, "spec.idle.afterSeconds",
         "must be a number of seconds > 0 and at most 31622400, got -5"),
        ({"afterSeconds": 5, "action": "Sleep"}, "spec.idle.action",
         "must be one of Freeze, Pause, Suspend, got 'Sleep'"),
    ]  # fmt: skip
    for policy, field, message in cases:
        response = await api.post(f"{A}/templates", json={"name": "bad", "spec": {"containers": CONTAINERS, "idle": policy}})
        assert response.status_code == 400, response.text
        assert fields_of(response) == {field: message}
    response = await api.post(
        f"{A}/templates", json={"name": "bad", "spec": {"containers": CONTAINERS, "suspendUnderPressure": "yes"}}
    )
    assert response.status_code == 400
    assert list(fields_of(response)) == ["spec.suspendUnderPressure"]
    assert await stored_state(api_store) == before


async def test_an_actor_shows_the_policy_in_force_and_where_it_comes_from(api: httpx.AsyncClient, atespace: str) -> None:
    inherited = (await api.post(f"{A}/actors", json={"name": "a1", "template": "lazy"})).json()
    assert inherited["idle"]["source"] == "template"
    assert inherited["idle"]["policy"] == TWO_STEPS
    # SUSPENDED: not idle on a worker, nothing due
    assert (inherited["idle"]["idle_seconds"], inherited["idle"]["next_action"]) == (None, None)
    own = {"afterSeconds": 300, "action": "Suspend"}
    created = (await api.post(f"{A}/actors", json={"name": "a2", "template": "busy", "idle": own})).json()
    assert created["idle"]["source"] == "actor" and created["idle"]["policy"] == [own]
    plain = (await api.post(f"{A}/actors", json={"name": "a3", "template": "busy"})).json()
    assert plain["idle"] is None  # neither the actor nor its template has one


async def test_a_policy_is_changed_later_turned_off_and_given_back_to_the_template(
    api: httpx.AsyncClient, atespace: str
) -> None:
    assert (await api.post(f"{A}/actors", json={"name": "b1", "template": "lazy"})).status_code == 201
    step = [{"afterSeconds": 5, "action": "Pause"}]
    changed = (await api.patch(f"{A}/actors/b1", json={"idle": step})).json()
    assert (changed["idle"]["source"], changed["idle"]["policy"]) == ("actor", step)
    off = (await api.patch(f"{A}/actors/b1", json={"idle": []})).json()
    assert (off["idle"]["source"], off["idle"]["policy"]) == ("actor", [])  # off for this actor only
    back = (await api.patch(f"{A}/actors/b1", json={"idle": None})).json()
    assert (back["idle"]["source"], back["idle"]["policy"]) == ("template", TWO_STEPS)
    assert back["worker_selector"] == {}  # a field not given is kept


async def test_a_bad_actor_policy_or_an_empty_change_is_refused(
    api: httpx.AsyncClient, api_store: Store, atespace: str
) -> None:
    assert (await api.post(f"{A}/actors", json={"name": "c1", "template": "lazy"})).status_code == 201
    before = await stored_state(api_store)
    bad = await api.post(f"{A}/actors", json={"name": "c2", "template": "lazy", "idle": {"afterSeconds": 0, "action": "Suspend"}})
    assert bad.status_code == 400
    assert list(fields_of(bad)) == ["idle.afterSeconds"]
    wrong = await api.patch(f"{A}/actors/c1", json={"idle": [{"afterSeconds": 9, "action": "Suspend"}, {"afterSeconds": 99, "action": "Pause"}]})
    assert wrong.status_code == 400
    assert fields_of(wrong) == {
        "idle[1].action": "Pause cannot follow Suspend: actions come in the order Freeze, Pause, Suspend, each at most once"
    }
    empty = await api.patch(f"{A}/actors/c1", json={})
    assert empty.status_code == 400
    assert "give worker_selector, idle or egress (the fields to replace)" in empty.json()["message"]
    missing = await api.patch(f"{A}/actors/nope", json={"idle": []})
    assert missing.status_code == 404
    assert await stored_state(api_store) == before


async def test_the_judge_starts_the_due_step_with_its_reason(
    api: httpx.AsyncClient, api_store: Store, atespace: str, temporal_address: str
) -> None:
    # Two actors made RUNNING and FROZEN by hand (no atelet runs here), idle for 30 s; the policy
    # is Freeze after 20 s, then Suspend after 600 s: the RUNNING one is due to freeze (giving way
    # to traffic), the FROZEN one is not due yet; a third, idle for 700 s and FROZEN, is due to
    # suspend. No Temporal worker runs: the started workflows stay scheduled, their input visible.
    for name, state, idle in (("j1", "RUNNING", 30), ("j2", "FROZEN", 30), ("j3", "FROZEN", 700)):
        assert (await api.post(f"{A}/actors", json={"name": name, "template": "lazy"})).status_code == 201
        await api_store.pool.execute(
            "UPDATE actors SET state = $3, last_active_at = now() - make_interval(secs => $4) "
            "WHERE atespace = $1 AND name = $2", atespace, name, state, idle,
        )  # fmt: skip
    temporal = await Client.connect(temporal_address)
    judge = IdleJudge(api_store, temporal)
    started = {(ref.name, action.value) for ref, action in await judge.judge() if ref.atespace == atespace}
    assert started == {("j1", "Freeze"), ("j3", "Suspend")}
    again = {ref.name for ref, _ in await judge.judge() if ref.atespace == atespace}
    assert again == set()  # their workflow IDs are held: nothing is started twice

    j1 = temporal.get_workflow_handle(ActorRef(atespace, "j1").workflow_id)
    assert (await j1.describe()).workflow_type == "FreezeActor"
    [freeze] = await _inputs(j1, FreezeActorInput)
    assert freeze.if_idle and freeze.reason is not None and freeze.reason.startswith("idle for 3")
    j3 = temporal.get_workflow_handle(ActorRef(atespace, "j3").workflow_id)
    assert (await j3.describe()).workflow_type == "SuspendActor"
    [suspend] = await _inputs(j3, SuspendActorInput)
    assert suspend.if_idle  # a request may have thawed it since the judge read it: it gives way
    assert suspend.reason is not None and suspend.reason.startswith("idle for 70")
    for handle in (j1, j3):
        await handle.terminate("test done")


async def _inputs(handle: Any, kind: type[Any]) -> list[Any]:
    history = await handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    converter = handle._client.data_converter
    return list(await converter.decode(started.input.payloads, [kind]))
