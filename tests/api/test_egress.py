"""Egress policies through the REST API on a real PostgreSQL (issue 28): a template declares its
actors' egress and an actor narrows it; a bad policy is refused naming the field and changes
nothing; a credential must name a secret of the atespace; and the node holding an actor, and
only that node, learns the policy in force with its secrets' values (what its egress proxy
applies), from the next connection after a change."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from atelet.egress.policies import read_document
from domain.refs import ActorRef
from store import Store
from tests.api.conftest import stored_state
from tests.credentials import node_token

A = "/v1/atespaces/outbound"
VALUE = "sk-test-0123456789"
WORKER = {"name": "default-0", "pool": "default", "ip": "10.98.0.2", "cpu_millis": 1000, "memory_bytes": 2**30}
EGRESS = {
    "allow": [
        {"host": "api.model.test", "ports": [443]},
        {"host": "*.pypi.test", "ports": [443, 80]},
        {"cidr": "10.20.0.0/16", "ports": [5432]},
    ],
    "credentials": [{"host": "api.model.test", "header": "X-Api-Key", "secret": "model-key"}],
}
STORED = {  # as the API keeps and shows it: ports sorted, the header lower-cased
    "allow": [
        {"host": "api.model.test", "ports": [443]},
        {"host": "*.pypi.test", "ports": [80, 443]},
        {"cidr": "10.20.0.0/16", "ports": [5432]},
    ],
    "credentials": [{"host": "api.model.test", "header": "x-api-key", "secret": "model-key"}],
}


class As(httpx.Auth):
    """A request with exactly this bearer token (not the suite's choice)."""

    def __init__(self, token: str) -> None:
        self.token = token

    def auth_flow(self, request: httpx.Request) -> Any:
        request.headers["Authorization"] = f"Bearer {self.token}"
        yield request


def spec(**fields: Any) -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": "oci:x:latest", "port": 8080}], **fields}


@pytest.fixture
async def atespace(api: httpx.AsyncClient) -> AsyncIterator[str]:
    made = await api.post("/v1/atespaces", json={"name": "outbound"})
    assert made.status_code in (201, 409), made.text
    secret = await api.post(f"{A}/secrets", json={"name": "model-key", "value": VALUE})
    assert secret.status_code in (201, 409), secret.text
    yield "outbound"


async def test_a_template_keeps_its_egress_and_a_bad_one_is_refused_naming_the_field(
    api: httpx.AsyncClient, atespace: str, api_store: Store
) -> None:
    made = await api.post(f"{A}/templates", json={"name": "agent", "spec": spec(egress=EGRESS)})
    assert made.status_code == 201, made.text
    assert made.json()["spec"]["egress"] == STORED
    plain = await api.post(f"{A}/templates", json={"name": "plain", "spec": spec()})
    assert "egress" not in plain.json()["spec"]  # none: no egress, as before
    before = await stored_state(api_store)
    cases = [
        ({"allow": [{"host": "a.test", "ports": [443]}], "deny": []}, "spec.egress.deny", "unknown field"),
        ({"allow": [{"host": "a*.test", "ports": [443]}]}, "spec.egress.allow[0].host", "is not a DNS name"),
        ({"allow": [{"cidr": "10.20.0.1/16", "ports": [443]}]}, "spec.egress.allow[0].cidr", "is not a network"),
        ({"allow": [{"host": "a.test", "ports": [0]}]}, "spec.egress.allow[0].ports[0]", "is not a port (1-65535)"),
        ({"allow": [{"host": "a.test", "ports": [65536]}]}, "spec.egress.allow[0].ports[0]", "is not a port"),
        ({"allow": [{"host": "a.test"}]}, "spec.egress.allow[0].ports", "give the ports"),
        ({"allow": [{"host": "a.test", "ports": [443]}],
          "credentials": [{"host": "b.test", "header": "x-k", "secret": "model-key"}]},
         "spec.egress.credentials[0].host", "is not allowed by any allow rule"),
        ({"allow": [{"host": "a.test", "ports": [443]}],
          "credentials": [{"host": "a.test", "header": "Host", "secret": "model-key"}]},
         "spec.egress.credentials[0].header", "cannot be set"),
    ]  # fmt: skip
    for index, (egress, field, problem) in enumerate(cases):
        refused = await api.post(f"{A}/templates", json={"name": f"bad{index}", "spec": spec(egress=egress)})
        assert refused.status_code == 400, (egress, refused.text)
        assert field in refused.text and problem in refused.text, (field, refused.text)
    missing = {"allow": [{"host": "a.test", "ports": [443]}],
               "credentials": [{"host": "a.test", "header": "x-k", "secret": "no-such"}]}  # fmt: skip
    refused = await api.post(f"{A}/templates", json={"name": "nosecret", "spec": spec(egress=missing)})
    assert refused.status_code == 400, refused.text
    assert refused.json()["details"] == {"field": "spec.egress.credentials[0].secret"}
    assert refused.json()["message"].startswith(
        "spec.egress.credentials[0].secret: atespace outbound has no secret no-such; create it first"
    )
    assert await stored_state(api_store) == before  # nothing changed by any of them


async def test_an_actor_narrows_its_templates_egress_and_the_node_holding_it_learns_it(
    api: httpx.AsyncClient, atespace: str, api_store: Store
) -> None:
    made = await api.post(f"{A}/templates", json={"name": "agent2", "spec": spec(egress=EGRESS)})
    assert made.status_code == 201, made.text
    wider = {"allow": [{"host": "*.model.test", "ports": [443]}]}
    refused = await api.post(f"{A}/actors", json={"name": "a1", "template": "agent2", "egress": wider})
    assert refused.status_code == 400 and "egress.allow[0]" in refused.text, refused.text
    assert "not within the template's egress" in refused.text
    assert (await api.get(f"{A}/actors/a1")).status_code == 404  # not made
    narrow = {"allow": [{"host": "files.pypi.test", "ports": [443]}]}
    actor = await api.post(f"{A}/actors", json={"name": "a1", "template": "agent2", "egress": narrow})
    assert actor.status_code == 201, actor.text
    assert actor.json()["egress"] == {"allow": [{"host": "files.pypi.test", "ports": [443]}], "credentials": []}
    other = await api.post(f"{A}/actors", json={"name": "a2", "template": "agent2"})
    assert other.json()["egress"] is None  # its template's

    # Placed on a worker of node eg1 (as a resume does), the node asks what its proxy applies.
    registered = await api.put("/v1/nodes/eg1", json={"address": "10.0.0.9:8085", "workers": [WORKER]})
    assert registered.status_code == 200, registered.text
    await api_store.golden_snapshots.complete(
        "outbound", "agent2", (await api_store.golden_snapshots.begin("outbound", "agent2", "g")).snapshot.snapshot_id,
        {"files": []}, 10,
    )  # fmt: skip
    ref = ActorRef("outbound", "a2")
    plan = await api_store.resumes.begin(ref, "op1")
    await api_store.resumes.finish(ref, "op1")
    assert plan.worker is not None and plan.worker.node == "eg1"
    route = f"/v1/nodes/eg1/workers/{plan.worker.name}/actors/outbound/a2/egress"
    node = As(node_token("eg1"))
    answer = await api.get(route, auth=node)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "allow": STORED["allow"], "source": "template",
        "credentials": [{"host": "api.model.test", "header": "x-api-key", "secret": "model-key", "value": VALUE,
                         "problem": None}],
    }  # fmt: skip

    # What the node's egress proxy reads of that answer (atelet.egress.policies): the policy and the value.
    fetched = read_document(answer.json())
    assert (fetched.values, [c.header for c in fetched.policy.credentials]) == ({"api.model.test": VALUE}, ["x-api-key"])

    # Nobody else learns it: not another node, not a cluster admin's token, not for another worker.
    assert (await api.get(route, auth=As(node_token("eg2")))).status_code == 403
    admin = await api.get(route)
    assert admin.status_code == 403 and VALUE not in admin.text
    elsewhere = await api.get("/v1/nodes/eg1/workers/default-9/actors/outbound/a2/egress", auth=node)
    assert elsewhere.status_code == 403 and "does not hold actor outbound/a2" in elsewhere.json()["message"]
    assert VALUE not in (await api.get(f"{A}/actors/a2")).text

    # A change applies at the next ask: narrowed, then none, then the template's again.
    changed = await api.patch(f"{A}/actors/a2", json={"egress": narrow})
    assert changed.status_code == 200 and changed.json()["egress"]["allow"] == narrow["allow"], changed.text
    now = (await api.get(route, auth=node)).json()
    assert (now["allow"], now["credentials"], now["source"]) == (narrow["allow"], [], "actor")
    assert (await api.patch(f"{A}/actors/a2", json={"egress": {}})).status_code == 200
    assert (await api.get(route, auth=node)).json() == {"allow": [], "credentials": [], "source": "actor"}
    bad = await api.patch(f"{A}/actors/a2", json={"egress": wider})
    assert bad.status_code == 400 and (await api.get(f"{A}/actors/a2")).json()["egress"] == {"allow": [], "credentials": []}
    assert (await api.patch(f"{A}/actors/a2", json={"egress": None})).json()["egress"] is None
    assert (await api.get(route, auth=node)).json()["source"] == "template"

    # A secret deleted after the template named it: the node is told which and why, never a value.
    assert (await api.delete(f"{A}/secrets/model-key")).status_code == 204
    [credential] = (await api.get(route, auth=node)).json()["credentials"]
    assert credential["value"] is None
    assert credential["problem"] == "secret model-key no longer exists in atespace outbound"
    fetched = read_document((await api.get(route, auth=node)).json())
    assert fetched.values == {} and [c.host for c in fetched.policy.credentials] == ["api.model.test"]


async def test_outbound_traffic_a_node_reports_makes_only_the_actor_it_holds_active(
    api: httpx.AsyncClient, atespace: str, api_store: Store
) -> None:
    """A heartbeat's `egress_active` on a worker sets its actor's last_active_at to now (its idle
    time starts again), only for the actor placed on that worker of that node."""
    assert (await api.post(f"{A}/templates", json={"name": "agent3", "spec": spec(egress=EGRESS)})).status_code == 201
    selector = {"egress-test": "three"}  # a3 goes to eg3's worker, the only one so labelled
    assert (await api.post(f"{A}/actors", json={"name": "a3", "template": "agent3",
                                                "worker_selector": selector})).status_code == 201  # fmt: skip
    assert (await api.post(f"{A}/actors", json={"name": "a4", "template": "agent3"})).status_code == 201
    worker = {**WORKER, "ip": "10.98.1.2"}
    for node, labels in (("eg3", selector), ("eg4", {})):
        registered = await api.put(f"/v1/nodes/{node}", json={"address": "10.0.0.9:8085",
                                                               "workers": [{**worker, "labels": labels}]})  # fmt: skip
        assert registered.status_code == 200, registered.text
    begun = await api_store.golden_snapshots.begin("outbound", "agent3", "g3")
    await api_store.golden_snapshots.complete("outbound", "agent3", begun.snapshot.snapshot_id, {"files": []}, 10)
    ref = ActorRef("outbound", "a3")
    plan = await api_store.resumes.begin(ref, "op3")
    await api_store.resumes.finish(ref, "op3")
    assert plan.worker is not None and (plan.worker.node, plan.worker.name) == ("eg3", "default-0")
    hour_ago = "UPDATE actors SET last_active_at = now() - interval '1 hour' WHERE atespace = 'outbound' AND name = ANY($1)"
    idle_seconds = "SELECT name, extract(epoch FROM now() - last_active_at) AS s FROM actors WHERE atespace = 'outbound' " \
                   "AND name = ANY($1) ORDER BY name"  # fmt: skip

    async def beat(node: str, actor: str, active: bool) -> None:
        labels = selector if node == "eg3" else {}
        body = {"address": "10.0.0.9:8085", "workers": [{**worker, "labels": labels, "sandbox_state": "running",
                                                          "actor": {"atespace": "outbound", "name": actor},
                                                          "egress_active": active}]}  # fmt: skip
        answer = await api.put(f"/v1/nodes/{node}", json=body)
        assert answer.status_code == 200, answer.text

    async def idle() -> dict[str, float]:
        return {r["name"]: float(r["s"]) for r in await api_store.pool.fetch(idle_seconds, ["a3", "a4"])}

    await api_store.pool.execute(hour_ago, ["a3", "a4"])
    await beat("eg3", "a3", False)  # no outbound traffic: nothing changes
    assert all(seconds > 3500 for seconds in (await idle()).values())
    await beat("eg4", "a3", True)  # another node claims it: not the node holding it
    await beat("eg4", "a4", True)  # nor one not placed anywhere
    assert all(seconds > 3500 for seconds in (await idle()).values())
    await beat("eg3", "a3", True)
    seconds = await idle()
    assert seconds["a3"] < 5 and seconds["a4"] > 3500, seconds
