"""Pull secrets through the REST API (issue 29): a real registry on loopback with TLS and HTTP
basic auth (tests/registry.py: Debian's docker-registry, an htpasswd file of user `puller`)
holds the example counter. A template without credentials is refused as unauthorized, saying how
to add a pull secret; with a wrong password, naming the secret whose credentials were refused;
with the right one (after a wrong one: tried in order), pinned to the digest the push produced.
Registry secrets are checked field by field and never shown; a node learns the credentials only
for an image of a template it can run."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from store import Store
from tests.api.conftest import stored_state
from tests.api.test_egress import As
from tests.api.test_registry_templates import register_node
from tests.atelet.conftest import build_counter_image
from tests.credentials import node_token
from tests.registry import LocalRegistry, local_registry

A = "/v1/atespaces/pulls"
PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module")
def registry() -> Iterator[tuple[LocalRegistry, str]]:
    with local_registry({"puller": PASSWORD}) as running:
        yield running, running.push(build_counter_image(), "team/counter:v1")


@pytest.fixture
async def atespace(api: httpx.AsyncClient) -> AsyncIterator[str]:
    made = await api.post("/v1/atespaces", json={"name": "pulls"})
    assert made.status_code in (201, 409), made.text
    yield "pulls"


async def _secret(api: httpx.AsyncClient, name: str, registry: str, password: str) -> None:
    made = await api.post(f"{A}/secrets", json={"name": name, "type": "registry", "registry": registry,
                                                "username": "puller", "password": password})  # fmt: skip
    assert made.status_code in (201, 409), made.text


def template(name: str, image: str, pulls: list[str] | None = None) -> dict[str, object]:
    spec: dict[str, object] = {"containers": [{"name": "c", "image": image, "port": 8080}]}
    if pulls is not None:
        spec["imagePullSecrets"] = [{"name": n} for n in pulls]
    return {"name": name, "spec": spec}


async def test_a_registry_secret_is_checked_field_by_field_and_never_shown(
    api: httpx.AsyncClient, api_store: Store, atespace: str
) -> None:
    before = await stored_state(api_store)
    good = {"name": "bad", "type": "registry", "registry": "registry.example.com:5000", "username": "ci",
            "password": "p"}  # fmt: skip
    cases = [
        ({"username": None}, "username", "required for a secret of type registry"),
        ({"username": "a:b"}, "username", "without ':'"),
        ({"registry": "https://registry.example.com"}, "registry", "is not a registry host[:port]"),
        ({"password": ""}, "password", "non-empty password"),
        ({"password": "two\nlines"}, "password", "without line breaks"),
        ({"value": "x"}, "value", "a registry secret takes registry, username and password"),
        ({"type": "opaque", "value": "x"}, "registry", "only a secret of type registry takes it"),
        ({"type": "docker"}, "type", "opaque"),
    ]
    for change, field, words in cases:
        body = {k: v for k, v in (good | change).items() if v is not None}
        refused = await api.post(f"{A}/secrets", json=body)
        assert refused.status_code in (400, 422) and words in refused.text and field in refused.text, (change, refused.text)
        assert (await api.get(f"{A}/secrets/bad")).status_code == 404
    assert await stored_state(api_store) == before
    made = await api.post(f"{A}/secrets", json=good | {"name": "shown", "password": "hunter2-secret"})
    assert made.status_code == 201, made.text
    assert (made.json()["type"], made.json()["registry"]) == ("registry", "registry.example.com:5000")
    listed = await api.get(f"{A}/secrets")
    assert "hunter2-secret" not in listed.text and "hunter2-secret" not in made.text
    assert {s["name"]: s["type"] for s in listed.json()["items"]}["shown"] == "registry"
    # a credential header takes an opaque secret, never a registry one
    egress = {"allow": [{"host": "api.example.com", "ports": [443]}],
              "credentials": [{"host": "api.example.com", "header": "x-key", "secret": "shown"}]}  # fmt: skip
    spec = {"containers": [{"name": "c", "image": "oci:examples/counter/oci:latest", "port": 8080}], "egress": egress}
    refused = await api.post(f"{A}/templates", json={"name": "leaky", "spec": spec})
    assert refused.status_code == 400 and "spec.egress.credentials[0].secret" in refused.text, refused.text
    assert "registry secret" in refused.text, refused.text


async def test_an_image_behind_basic_auth_needs_a_pull_secret_that_the_registry_accepts(
    api: httpx.AsyncClient, api_store: Store, atespace: str, registry: tuple[LocalRegistry, str]
) -> None:
    running, pushed = registry
    image = f"{running.address}/team/counter:v1"
    await _secret(api, "wrong", running.address, "not the password")
    await _secret(api, "right", running.address, PASSWORD)
    await _secret(api, "elsewhere", "registry.example.com", PASSWORD)  # another registry's: not used here
    opaque = await api.post(f"{A}/secrets", json={"name": "plain", "value": PASSWORD})
    assert opaque.status_code in (201, 409), opaque.text
    before = await stored_state(api_store)

    anonymous = await api.post(f"{A}/templates", json=template("anon", image))
    assert anonymous.status_code == 409, anonymous.text
    problem = anonymous.json()
    assert problem["details"]["problem"] == "unauthorized", problem
    assert "--type registry" in problem["message"] and "spec.imagePullSecrets" in problem["message"], problem

    refused = await api.post(f"{A}/templates", json=template("denied", image, ["elsewhere", "wrong"]))
    assert refused.status_code == 409, refused.text
    assert refused.json()["details"]["problem"] == "unauthorized", refused.text
    assert "refused the credentials of pull secret pulls/wrong (user puller)" in refused.json()["message"], refused.text
    assert PASSWORD not in refused.text

    for pulls, field, words in ((["missing"], "spec.imagePullSecrets[0].name", "has no secret missing"),
                                (["right", "plain"], "spec.imagePullSecrets[1].name", "of type opaque, not registry"),
                                (["right", "right"], "imagePullSecrets", "names must be unique")):  # fmt: skip
        bad = await api.post(f"{A}/templates", json=template("bad", image, pulls))
        assert bad.status_code in (400, 422) and field in bad.text and words in bad.text, (pulls, bad.text)
    assert await stored_state(api_store) == before

    made = await api.post(f"{A}/templates", json=template("pulled", image, ["wrong", "right"]))
    assert made.status_code == 201, made.text
    assert made.json()["spec"]["containers"][0]["image"] == f"{image}@{pushed}"
    assert made.json()["spec"]["imagePullSecrets"] == [{"name": "wrong"}, {"name": "right"}]


async def test_a_node_gets_the_credentials_only_for_an_image_of_a_template_it_can_run(
    api: httpx.AsyncClient, atespace: str, registry: tuple[LocalRegistry, str]
) -> None:
    running, _ = registry
    pushed = running.push(build_counter_image(), "team/for-nodes:v1")  # an image only this test's template runs
    image = f"{running.address}/team/for-nodes:v1"
    await _secret(api, "right", running.address, PASSWORD)
    made = await api.post(f"{A}/templates", json=template("for-nodes", image, ["right"]))
    assert made.status_code in (201, 409), made.text
    await register_node(api, "pull1", "10.97.7.2")
    await register_node(api, "pull2", "10.97.8.2", "microvm")
    pinned = f"{image}@{pushed}"
    url = "/v1/nodes/{}/image-credentials"
    got = await api.get(url.format("pull1"), params={"image": pinned}, auth=As(node_token("pull1")))
    assert got.status_code == 200, got.text
    assert got.json() == {"credentials": [{"secret": "pulls/right", "registry": running.address, "username": "puller",
                                           "password": PASSWORD}], "problems": []}  # fmt: skip
    # a node whose workers cannot run the template (microvm), an image no template runs: nothing
    for node, asked in (("pull2", pinned), ("pull1", f"{running.address}/team/other:v1@{pushed}")):
        answer = await api.get(url.format(node), params={"image": asked}, auth=As(node_token(node)))
        assert answer.json() == {"credentials": [], "problems": []}, (node, asked, answer.text)
    assert (await api.get(url.format("pull1"), params={"image": pinned}, auth=As(node_token("pull2")))).status_code == 403
    malformed = await api.get(url.format("pull1"), params={"image": "Not An Image"}, auth=As(node_token("pull1")))
    assert malformed.status_code == 400 and "image" in malformed.text, malformed.text
