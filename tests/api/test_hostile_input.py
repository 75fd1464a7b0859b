"""Hostile values in every request body that stores something: names, labels, quantities,
image references, paths, snapshot locations, environment names, 1 MB strings, NUL bytes,
deeply nested JSON and unknown fields.

Each request is refused with 400 (InvalidArgument), the message names the field at fault, and
nothing changed: the store reads the same before and after (`stored_state`). The requests go
to a real api-server (tests/api/conftest.py) in which atespace `host`, its template `web` and
its actor `a1` exist, so the refusals are about the values, not about what is missing.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from store import Store
from tests.api.conftest import ApiServer, stored_state

MEGABYTE = "m" * 1_000_000
GOOD_CONTAINER = {"name": "app", "image": "oci:app:v1", "port": 8080}
WORKER = {"name": "default-0", "pool": "default", "ip": "10.99.0.2", "cpu_millis": 1000, "memory_bytes": 2**30}


def nested(depth: int) -> Any:
    """`depth` mappings, each the only value of the one before: {"a": {"a": ... {}}}."""
    value: Any = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def template(**container: Any) -> dict[str, Any]:
    return {"name": "evil", "spec": {"containers": [{**GOOD_CONTAINER, **container}]}}


def spec(**fields: Any) -> dict[str, Any]:
    return {"name": "evil", "spec": {"containers": [GOOD_CONTAINER], **fields}}


def node(**fields: Any) -> dict[str, Any]:
    return {"address": "10.0.0.9:8085", "workers": [WORKER], **fields}


def worker(**fields: Any) -> dict[str, Any]:
    return {"address": "10.0.0.9:8085", "workers": [{**WORKER, **fields}]}


TEMPLATES = "/v1/atespaces/host/templates"
ACTORS = "/v1/atespaces/host/actors"

CASES: list[tuple[str, str, str, Any, str, str]] = [
    # (case id, method, path, body, field, words of its message)
    ("atespace-traversal", "POST", "/v1/atespaces", {"name": "../etc"}, "name", "'../etc' is not a valid name"),
    ("atespace-nul", "POST", "/v1/atespaces", {"name": "de\x00mo"}, "name", "must not contain NUL characters"),
    ("atespace-1mb", "POST", "/v1/atespaces", {"name": MEGABYTE}, "name", "is 1000000 characters long; at most 16384"),
    ("atespace-unknown-field", "POST", "/v1/atespaces", {"name": "ok", "owner": "x"}, "owner", "unknown field"),
    ("atespace-deep", "POST", "/v1/atespaces", {"name": "ok", "x": nested(40)}, "x" + ".a" * 31,
     "nests deeper than 32 levels"),
    ("template-name", "POST", TEMPLATES, {**template(), "name": "../web"}, "name", "'../web' is not a valid name"),
    ("image-traversal", "POST", TEMPLATES, template(image="oci:../../etc:latest"), "spec.containers[0].image",
     "without '..'"),
    ("image-absolute", "POST", TEMPLATES, template(image="oci:/etc/app:latest"), "spec.containers[0].image",
     "relative to the atelet's image root"),
    ("image-nul", "POST", TEMPLATES, template(image="oci:app\x00:latest"), "spec.containers[0].image",
     "must not contain NUL characters"),
    ("image-space", "POST", TEMPLATES, template(image="oci:app x:latest"), "spec.containers[0].image",
     "must be a local OCI image layout"),
    ("container-name-long", "POST", TEMPLATES, template(name="c" * 64), "spec.containers[0].name",
     "String should match pattern"),
    ("env-name", "POST", TEMPLATES, template(env={"PATH=/evil:": "x"}), "spec.containers[0].env",
     "is not an environment variable name"),
    ("env-value-nul", "POST", TEMPLATES, template(env={"A": "x\x00y"}), "spec.containers[0].env.A",
     "must not contain NUL characters"),
    ("command-1mb", "POST", TEMPLATES, template(command=["/app", MEGABYTE]), "spec.containers[0].command[1]",
     "is 1000000 characters long"),
    ("probe-path-crlf", "POST", TEMPLATES,
     template(wakeupProbe={"httpGet": {"port": 8080, "path": "/ready\r\nHost: evil"}}),
     "spec.containers[0].wakeupProbe.httpGet.path", "must not contain spaces or control characters"),
    ("mount-traversal", "POST", TEMPLATES,
     {"name": "evil", "spec": {"containers": [{**GOOD_CONTAINER, "volumeMounts": [
         {"name": "data", "mountPath": "/data/../etc"}]}], "volumes": [{"name": "data", "durableDir": {}}]}},
     "spec.containers[0].volumeMounts[0].mountPath", "must be an absolute path without '..'"),
    ("durable-dir-deep", "POST", TEMPLATES, spec(volumes=[{"name": "data", "durableDir": nested(40)}]),
     "spec.volumes[0].durableDir" + ".a" * 28, "nests deeper than 32 levels"),
    ("cpu-negative", "POST", TEMPLATES, spec(resources={"limits": {"cpu": "-1"}}), "spec.resources.limits.cpu",
     "'-1' is not a CPU quantity"),
    ("cpu-huge", "POST", TEMPLATES, spec(resources={"limits": {"cpu": "1000000000"}}), "spec.resources.limits.cpu",
     "is more CPU than ate allows"),
    ("memory-huge", "POST", TEMPLATES, spec(resources={"limits": {"memory": "99999Ti"}}),
     "spec.resources.limits.memory", "is more memory than ate allows"),
    ("location-traversal", "POST", TEMPLATES, spec(snapshotConfig={"storageLocation": "file:///etc/../root"}),
     "spec.snapshotConfig.storageLocation", "must not contain '..' or '.' segments"),
    ("location-encoded-traversal", "POST", TEMPLATES,
     spec(snapshotConfig={"storageLocation": "file:///snapshots/%2e%2e/%2e%2e/etc"}),
     "spec.snapshotConfig.storageLocation", "nor percent-encoded ones"),
    ("location-credentials", "POST", TEMPLATES, spec(snapshotConfig={"storageLocation": "s3://key:secret@b/x"}),
     "spec.snapshotConfig.storageLocation", "must not carry credentials"),
    ("selector-key", "POST", TEMPLATES, spec(workerSelector={"../x": "y"}), "spec.workerSelector",
     "is not a valid label key"),
    ("spec-unknown-field", "POST", TEMPLATES, spec(privileged=True), "spec.privileged", "unknown field"),
    ("actor-name", "POST", ACTORS, {"name": "a/../b", "template": "web"}, "name", "is not a valid name"),
    ("actor-template-traversal", "POST", ACTORS, {"name": "a2", "template": "../web"}, "template",
     "is not a valid template name"),
    ("actor-from-tag", "POST", ACTORS, {"name": "a2", "from_tag": "host/../t"}, "from_tag",
     "must be <atespace>/<tag>"),
    ("actor-selector-value", "POST", ACTORS, {"name": "a2", "template": "web", "worker_selector": {"zone": "a\x00"}},
     "worker_selector.zone", "must not contain NUL characters"),
    ("patch-selector", "PATCH", f"{ACTORS}/a1", {"worker_selector": {"zone": "x" * 64}}, "worker_selector",
     "is not a valid label value"),
    ("tag-traversal", "POST", f"{ACTORS}/a1/tags", {"tag": "../t"}, "tag", "is not a valid name"),
    ("node-address-port", "PUT", "/v1/nodes/n9", node(address="10.0.0.9:99999"), "address", "is not host:port"),
    ("node-address-traversal", "PUT", "/v1/nodes/n9", node(address="../../x:8085"), "address", "is not host:port"),
    ("worker-name-traversal", "PUT", "/v1/nodes/n9", worker(name="../w"), "workers[0].name",
     "is not a valid worker name"),
    ("worker-ip", "PUT", "/v1/nodes/n9", worker(ip="10.0.0.300"), "workers[0].ip", "is not an IP address"),
    ("worker-labels", "PUT", "/v1/nodes/n9", worker(labels={"tier": "a b"}), "workers[0].labels",
     "is not a valid label value"),
    ("worker-places", "PUT", "/v1/nodes/n9", worker(places=2**31), "workers[0].places",
     "must be 1, got 2147483648"),
    ("worker-runtime-long", "PUT", "/v1/nodes/n9", worker(runtime_version="q" * 1001), "workers[0].runtime_version",
     "at most 1000 characters"),
    ("worker-runtime-nul", "PUT", "/v1/nodes/n9", worker(runtime_version="qemu\x00"), "workers[0].runtime_version",
     "must not contain NUL characters"),
    ("node-path-nul", "PUT", "/v1/nodes/n9%00", node(), "path parameter node", "is not a valid node name"),
]  # fmt: skip


@pytest.fixture(scope="module")
def seeded(api_server: ApiServer, api_headers: dict[str, str]) -> None:
    """Atespace host, its template web and its actor a1."""
    with httpx.Client(base_url=api_server.url, headers=api_headers, timeout=30) as api:
        assert api.post("/v1/atespaces", json={"name": "host"}).status_code == 201
        created = api.post(TEMPLATES, json={"name": "web", "spec": {"containers": [GOOD_CONTAINER]}})
        assert created.status_code == 201, created.text
        assert api.post(ACTORS, json={"name": "a1", "template": "web"}).status_code == 201


def field_messages(body: dict[str, Any]) -> dict[str, str]:
    """field -> message, from per-field details or from a single `field` detail."""
    if "fields" in body["details"]:
        return {f["field"]: f["message"] for f in body["details"]["fields"]}
    return {body["details"]["field"]: body["message"]}


@pytest.mark.parametrize(
    ("method", "path", "body", "field", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
async def test_a_hostile_value_is_refused_naming_its_field_and_changes_nothing(
    api: httpx.AsyncClient, api_store: Store, seeded: None, method: str, path: str, body: Any, field: str, words: str
) -> None:
    before = await stored_state(api_store)
    response = await api.request(method, path, json=body)
    assert response.status_code == 400, response.text[:500]
    answer = response.json()
    assert answer["reason"] == "InvalidArgument"
    messages = field_messages(answer)
    assert field in messages, messages
    assert words in messages[field]
    assert field in answer["message"] and words in answer["message"]
    assert await stored_state(api_store) == before


async def test_json_nested_past_the_parser_is_refused_and_changes_nothing(
    api: httpx.AsyncClient, api_store: Store, seeded: None
) -> None:
    before = await stored_state(api_store)
    deep = '{"name": "ok", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    response = await api.post("/v1/atespaces", content=deep, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["reason"] == "InvalidArgument"
    assert await stored_state(api_store) == before


async def test_unknown_fields_of_a_node_registration_are_ignored_and_not_stored(
    api: httpx.AsyncClient, api_store: Store, seeded: None
) -> None:
    # Atelets may be newer than the api-server: their extra fields are dropped, never stored.
    registration = {**node(), "runsc_version": "release-1", "owner": "x", "workers": [{**WORKER, "root": True}]}
    response = await api.put("/v1/nodes/n8", json=registration)
    assert response.status_code == 200, response.text
    state = await stored_state(api_store)
    assert ("n8", "10.0.0.9:8085", "release-1") in state["nodes"]  # type: ignore[operator]
    assert ("n8", "default-0", "default", "10.99.0.2", "ACTIVE", 1000, 2**30) in state["workers"]  # type: ignore[operator]


async def test_each_workers_runtime_is_stored_and_an_older_atelet_sends_none(
    api: httpx.AsyncClient, api_store: Store, seeded: None
) -> None:
    # Placement check 4 reads a worker's runtime_version, or its node's runsc_version when it is ''.
    vm = {**WORKER, "name": "microvm-0", "pool": "microvm", "sandbox_class": "microvm",
          "runtime_version": "QEMU 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3), machine pc-q35-7.2, accelerator tcg"}  # fmt: skip
    response = await api.put("/v1/nodes/n7", json={**node(), "runsc_version": "release-1", "workers": [WORKER, vm]})
    assert response.status_code == 200, response.text
    rows = await api_store.pool.fetch("SELECT name, sandbox_class, runtime_version FROM workers WHERE node = 'n7'")
    assert sorted(tuple(r) for r in rows) == [
        ("default-0", "gvisor", ""),
        ("microvm-0", "microvm", "QEMU 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3), machine pc-q35-7.2, accelerator tcg"),
    ]


async def test_a_microvm_template_is_accepted_and_stored_as_microvm(
    api: httpx.AsyncClient, api_store: Store, seeded: None
) -> None:
    # Once refused ("cannot run on this build's workers"); now placement says when no worker of the
    # class exists ("add a worker pool of sandbox class microvm").
    body = {"name": "vm", "spec": {"sandboxClass": "microvm", "containers": [GOOD_CONTAINER]}}
    created = await api.post(TEMPLATES, json=body)
    assert created.status_code == 201, created.text
    assert created.json()["spec"]["sandboxClass"] == "microvm"
    assert (await api.get(f"{TEMPLATES}/vm")).json()["spec"]["sandboxClass"] == "microvm"
    assert (await api_store.templates.get("host", "vm")).spec.sandbox_class == "microvm"
