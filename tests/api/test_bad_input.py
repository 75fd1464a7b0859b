"""Regression tests of what property-based testing (test_schemathesis.py) and hostile input found
in the api-server: each request below once answered 500 or left its error outside the one
format, or registered a node no atelet could be; now each is refused with the right status,
a message naming the field, and nothing stored.
"""

from __future__ import annotations

from typing import Any

import httpx

from domain.refs import ActorRef
from domain.templates import ActorTemplateSpec
from store import Store
from tests.api.conftest import stored_state

WORKER = {"name": "default-0", "pool": "default", "ip": "10.99.0.2", "cpu_millis": 1000, "memory_bytes": 2**30}


def fields_of(response: httpx.Response) -> dict[str, str]:
    """field -> message of a 400 with per-field errors."""
    body = response.json()
    assert set(body) == {"reason", "message", "details"}
    return {f["field"]: f["message"] for f in body["details"]["fields"]}


async def test_a_cpu_beyond_int64_is_refused_naming_the_field(api: httpx.AsyncClient, api_store: Store) -> None:
    # The finding: this reached PostgreSQL ("value out of int64 range") and answered 500.
    before = await stored_state(api_store)
    response = await api.put(
        "/v1/nodes/n2", json={"address": "127.0.0.1:8085", "workers": [{**WORKER, "cpu_millis": 2**63}]}
    )
    assert response.status_code == 400
    assert response.json()["reason"] == "InvalidArgument"
    assert fields_of(response) == {"workers[0].cpu_millis": "Input should be less than or equal to 1000000000"}
    assert await stored_state(api_store) == before


async def test_places_and_memory_beyond_the_limits_are_refused(api: httpx.AsyncClient, api_store: Store) -> None:
    # places beyond int32 answered 500 ("value out of int32 range", found by schemathesis).
    before = await stored_state(api_store)
    worker = {**WORKER, "places": 23434755860462, "memory_bytes": 2**51}
    response = await api.put("/v1/nodes/n2", json={"address": "127.0.0.1:8085", "workers": [worker]})
    assert response.status_code == 400
    assert fields_of(response) == {
        "workers[0].places": "must be 1, got 23434755860462: a worker is one sandbox with one address and hosts one actor at a time; for more actors at once, run more workers (a pool's spec.replicas)",
        "workers[0].memory_bytes": "Input should be less than or equal to 1125899906842624",
    }
    assert await stored_state(api_store) == before


async def test_a_worker_that_claims_more_than_one_place_is_refused(api: httpx.AsyncClient, api_store: Store) -> None:
    # A worker is one sandbox: the atelet runs one actor on it, whatever a registration claims.
    before = await stored_state(api_store)
    response = await api.put("/v1/nodes/n2", json={"address": "127.0.0.1:8085", "workers": [{**WORKER, "places": 2}]})
    assert response.status_code == 400
    assert response.json()["reason"] == "InvalidArgument"
    assert fields_of(response) == {
        "workers[0].places": "must be 1, got 2: a worker is one sandbox with one address and hosts one actor at a time; for more actors at once, run more workers (a pool's spec.replicas)"
    }
    assert await stored_state(api_store) == before
    ok = await api.put("/v1/nodes/n2", json={"address": "127.0.0.1:8085", "workers": [{**WORKER, "places": 1}]})
    assert ok.status_code == 200


async def test_a_node_without_pool_name_or_address_is_refused(api: httpx.AsyncClient, api_store: Store) -> None:
    # The finding: this registered an ACTIVE worker with no pool, name or address.
    before = await stored_state(api_store)
    response = await api.put(
        "/v1/nodes/0", json={"address": "", "workers": [{**WORKER, "name": "", "pool": "", "ip": ""}]}
    )
    assert response.status_code == 400
    assert fields_of(response) == {
        "address": "'' is not host:port (e.g. 10.0.0.5:8085, [fd00::5]:8085 or node-1.example:8085)",
        "workers[0].name": "'' is not a valid worker name: use 1-253 lower-case letters, digits, '-' or '.', "
        "starting and ending with a letter or digit (e.g. 'default-0')",
        "workers[0].pool": "'' is not a valid pool name: use 1-63 lower-case letters, digits or '-', "
        "starting and ending with a letter or digit (e.g. 'demo', 'agent-7')",
        "workers[0].ip": "'' is not an IP address (e.g. 10.88.0.2 or fd00::2)",
    }
    assert await stored_state(api_store) == before


async def test_a_well_formed_node_still_registers(api: httpx.AsyncClient, api_store: Store) -> None:
    response = await api.put("/v1/nodes/Host-7.example", json={"address": "[fd00::7]:8085", "workers": [WORKER]})
    assert response.status_code == 200, response.text
    workers = [(w.node, w.name, w.pool, w.ip) for w in await api_store.nodes.list_workers()]
    assert ("Host-7.example", "default-0", "default", "10.99.0.2") in workers


async def test_a_worker_named_twice_is_refused(api: httpx.AsyncClient, api_store: Store) -> None:
    before = await stored_state(api_store)
    response = await api.put("/v1/nodes/n3", json={"address": "10.0.0.3:8085", "workers": [WORKER, WORKER]})
    assert response.status_code == 400
    assert fields_of(response) == {"workers": "worker names must be unique on a node; default-0 appear more than once"}
    assert await stored_state(api_store) == before


async def test_a_nul_character_in_text_is_refused_naming_the_field(api: httpx.AsyncClient, api_store: Store) -> None:
    # PostgreSQL cannot store NUL in text or jsonb: this answered 500.
    before = await stored_state(api_store)
    response = await api.put(
        "/v1/nodes/n4", json={"address": "10.0.0.4:8085", "runsc_version": "release-\x00", "workers": [WORKER]}
    )
    assert response.status_code == 400
    assert fields_of(response) == {"runsc_version": "must not contain NUL characters (\\u0000)"}
    assert await stored_state(api_store) == before


async def test_a_lone_surrogate_in_text_is_refused_naming_the_field(api: httpx.AsyncClient, api_store: Store) -> None:
    # JSON may escape half a UTF-16 pair ("\ud800"); no UTF-8 store can hold it: this answered 500.
    before = await stored_state(api_store)
    body = '{"address": "10.0.0.4:8085", "runsc_version": "r\\ud800", "workers": []}'
    response = await api.put("/v1/nodes/n4", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert fields_of(response) == {
        "runsc_version": "must be valid Unicode text (it holds a lone surrogate such as \\ud800)"
    }
    assert await stored_state(api_store) == before


async def test_a_malformed_name_in_the_path_is_refused(api: httpx.AsyncClient) -> None:
    # A NUL in a path parameter reached PostgreSQL and answered 500.
    response = await api.get("/v1/atespaces/de%00mo")
    assert response.status_code == 400
    assert response.json() == {
        "reason": "InvalidArgument",
        "message": "invalid request: path parameter atespace: 'de\\x00mo' is not a valid atespace name: use 1-63 "
        "lower-case letters, digits or '-', starting and ending with a letter or digit (e.g. 'demo', 'agent-7')",
        "details": {"field": "path parameter atespace"},
    }


async def test_a_malformed_name_in_the_query_is_refused(api: httpx.AsyncClient) -> None:
    response = await api.get("/v1/actors", params={"atespace": "a\x00"})
    assert response.status_code == 400
    assert response.json()["details"] == {"field": "query parameter atespace"}


async def test_a_page_token_that_names_no_actor_key_is_refused(api: httpx.AsyncClient) -> None:
    # base64 of ["a\u0000", "b"]: decoded, it reached PostgreSQL as a NUL and answered 500.
    import base64
    import json

    token = base64.urlsafe_b64encode(json.dumps(["a\x00", "b"]).encode()).decode()
    response = await api.get("/v1/actors", params={"page_token": token})
    assert response.status_code == 400
    assert response.json()["message"] == (
        "page_token is not a token this API issued; pass next_page_token from the previous page"
    )


async def test_a_cpu_quantity_too_large_for_a_float_is_refused(api: httpx.AsyncClient, api_store: Store) -> None:
    # "999...9" (400 digits) made float() infinite and round() raise OverflowError: 500.
    await api.post("/v1/atespaces", json={"name": "quant"})
    before = await stored_state(api_store)
    spec: dict[str, Any] = {
        "containers": [{"name": "app", "image": "oci:app:v1", "port": 8080}],
        "resources": {"limits": {"cpu": "9" * 400, "memory": "9" * 30}},
    }
    response = await api.post("/v1/atespaces/quant/templates", json={"name": "big", "spec": spec})
    assert response.status_code == 400
    assert fields_of(response) == {
        "spec.resources.limits.cpu": "'" + "9" * 78 + "…' is not a CPU quantity (examples: 500m, 1, 2.5)",
        "spec.resources.limits.memory": "'999999999999999999999999999999' is more memory than ate allows (1024Ti)",
    }
    assert await stored_state(api_store) == before


async def test_no_route_and_a_wrong_method_answer_in_the_one_format(api: httpx.AsyncClient) -> None:
    # Both answered FastAPI's own {"detail": ...}.
    missing = await api.get("/v1/nothing-here")
    assert missing.status_code == 404
    assert missing.json() == {
        "reason": "NotFound",
        "message": "no such route: GET /v1/nothing-here (GET /docs lists the API's routes)",
        "details": {},
    }
    wrong = await api.request("TRACE", "/v1/atespaces")
    assert wrong.status_code == 405
    assert wrong.headers["allow"] == "GET, POST"
    assert wrong.json() == {
        "reason": "MethodNotAllowed",
        "message": "method TRACE is not allowed on /v1/atespaces; use GET, POST",
        "details": {},
    }


async def test_an_unreadable_body_answers_in_the_one_format(api: httpx.AsyncClient) -> None:
    # JSON that is not UTF-8 answered {"detail": "There was an error parsing the body"}.
    response = await api.post(
        "/v1/atespaces", content=b'{"name": "\xff"}', headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json() == {
        "reason": "InvalidArgument",
        "message": "invalid request: the body could not be read; send JSON with Content-Type: application/json",
        "details": {},
    }


async def test_an_exit_reason_from_sandbox_output_is_made_printable_not_refused(
    api: httpx.AsyncClient, api_store: Store
) -> None:
    # The reason ends with the sandbox's last log line, which untrusted code writes: a NUL there
    # answered 500 (and the atelet retries forever), an ESC would reach operators' terminals.
    registered = await api.put("/v1/nodes/ev1", json={"address": "10.0.0.8:8085", "workers": [WORKER]})
    assert registered.status_code == 200
    ref = ActorRef("ev", "a1")
    await api_store.atespaces.create("ev")
    spec = {"containers": [{"name": "c", "image": "oci:x:latest", "port": 8080}],
            "snapshotConfig": {"storageLocation": "file:///snap"}}  # fmt: skip
    await api_store.templates.create("ev", "t", ActorTemplateSpec.from_document(spec))
    golden = await api_store.golden_snapshots.begin("ev", "t", "golden-op")
    await api_store.golden_snapshots.complete("ev", "t", golden.snapshot.snapshot_id, {"files": []}, 10)
    await api_store.actors.create(ref, "t", {})
    plan = await api_store.resumes.begin(ref, "op1")
    await api_store.resumes.finish(ref, "op1")
    assert plan.worker is not None
    event = {"worker": plan.worker.name, "actor": {"atespace": "ev", "name": "a1"}, "event": "exited",
             "reason": "exit status 1; last log line: \x1b[31mboom\x00"}  # fmt: skip
    response = await api.post(f"/v1/nodes/{plan.worker.node}/events", json=event)
    assert response.status_code == 200, response.text
    assert response.json() == {"accepted": True}
    actor = await api_store.actors.get(ref)
    assert actor.state == "CRASHED"
    assert actor.last_error == (
        f"sandbox exited on worker {plan.worker.name} ({plan.worker.node}): "
        "exit status 1; last log line: \ufffd[31mboom\ufffd"
    )


async def test_a_drain_of_an_unknown_node_is_refused(api: httpx.AsyncClient, api_store: Store) -> None:
    # It answered 200 and started a workflow that then failed (the chaos run: `ate drain node nosuch`
    # printed "draining").
    before = await stored_state(api_store)
    response = await api.post("/v1/nodes/nosuch/drain", json={"deadline_seconds": 60})
    assert response.status_code == 404, response.text
    assert response.json()["message"] == "node nosuch not found; the registered nodes are in 'ate get workers'"
    assert await stored_state(api_store) == before
