"""`POST .../actors/{name}/exec` refusals through the real api-server: a malformed command or
timeout names the field, an unknown actor is 404, an actor that is not RUNNING is 409 saying
what to do; none of them starts anything or changes a row. (A RUNNING actor's exec is tried on
the whole stack: tests/e2e/test_exec.py.)"""

from __future__ import annotations

import httpx

from domain.refs import ActorRef
from domain.templates import ActorTemplateSpec
from store import Store
from tests.api.conftest import stored_state

PATH = "/v1/atespaces/exa/actors/a1/exec"


async def test_bad_exec_requests_are_refused_and_change_nothing(api: httpx.AsyncClient, api_store: Store) -> None:
    if "exa" not in {a.name for a in await api_store.atespaces.all()}:
        await api_store.atespaces.create("exa")
        spec = {"containers": [{"name": "c", "image": "oci:x:latest", "port": 8080}]}
        await api_store.templates.create("exa", "t", ActorTemplateSpec.from_document(spec))
        await api_store.actors.create(ActorRef("exa", "a1"), "t", {})
    before = await stored_state(api_store)
    cases = [
        ({"command": []}, 400, "command"),
        ({"command": ["ls"], "timeout_seconds": 0}, 400, "timeout_seconds"),
        ({"command": ["ls"], "timeout_seconds": 7200}, 400, "timeout_seconds"),
        ({"command": [""]}, 400, "command: give a program to run"),
        ({"command": ["ls"], "tty": True}, 400, "tty"),
    ]
    for body, status, words in cases:
        refused = await api.post(PATH, json=body)
        assert refused.status_code == status and words in refused.text, (body, refused.text)
    missing = await api.post("/v1/atespaces/exa/actors/nosuch/exec", json={"command": ["ls"]})
    assert missing.status_code == 404, missing.text
    suspended = await api.post(PATH, json={"command": ["cat", "/data/count.txt"]})
    assert suspended.status_code == 409, suspended.text
    assert suspended.json()["message"] == (
        "actor exa/a1 is SUSPENDED: exec runs a command in a RUNNING actor; resume it first "
        "(`ate resume actor a1 -a exa`, or send it a request), then exec again")
    assert await stored_state(api_store) == before
