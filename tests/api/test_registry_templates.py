"""Template images from a container registry through the REST API (issue 29): a real registry on
loopback (tests/registry.py) holds the example counter; a template naming it by tag is recorded
pinned to the digest the push produced; a missing tag, a registry that is down and a malformed
reference are refused naming the field, and nothing is stored."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from store import Store
from tests.api.conftest import stored_state
from tests.atelet.conftest import build_counter_image
from tests.registry import LocalRegistry, local_registry

A = "/v1/atespaces/pulled"


@pytest.fixture(scope="module")
def registry() -> Iterator[tuple[LocalRegistry, str]]:
    with local_registry() as running:
        yield running, running.push(build_counter_image(), "examples/counter:v1")


@pytest.fixture
async def atespace(api: httpx.AsyncClient) -> AsyncIterator[str]:
    made = await api.post("/v1/atespaces", json={"name": "pulled"})
    assert made.status_code in (201, 409), made.text
    yield "pulled"


def template(name: str, image: str) -> dict[str, object]:
    return {"name": name, "spec": {"containers": [{"name": "c", "image": image, "port": 8080}]}}


async def test_a_tag_is_pinned_to_its_digest_when_the_template_is_made(
    api: httpx.AsyncClient, atespace: str, registry: tuple[LocalRegistry, str]
) -> None:
    running, pushed = registry
    made = await api.post(f"{A}/templates", json=template("by-tag", f"{running.address}/examples/counter:v1"))
    assert made.status_code == 201, made.text
    pinned = f"{running.address}/examples/counter:v1@{pushed}"
    assert made.json()["spec"]["containers"][0]["image"] == pinned
    assert (await api.get(f"{A}/templates/by-tag")).json()["spec"]["containers"][0]["image"] == pinned
    by_digest = await api.post(f"{A}/templates", json=template("by-digest", f"{running.address}/examples/counter@{pushed}"))
    assert by_digest.status_code == 201, by_digest.text
    assert by_digest.json()["spec"]["containers"][0]["image"] == f"{running.address}/examples/counter@{pushed}"


async def test_a_bad_image_is_refused_naming_the_field_and_changes_nothing(
    api: httpx.AsyncClient, api_store: Store, atespace: str, registry: tuple[LocalRegistry, str]
) -> None:
    running, _ = registry
    before = await stored_state(api_store)
    other_digest = "sha256:" + "0" * 64
    cases = [
        (f"{running.address}/examples/counter:nope", 400, "no such image"),
        (f"{running.address}/examples/counter@{other_digest}", 400, "no such image"),
        ("127.0.0.1:1/examples/counter:v1", 503, "registry unreachable"),
        (f"{running.address}/Examples/counter:v1", 400, "path component 'Examples'"),
    ]
    for image, status, words in cases:
        refused = await api.post(f"{A}/templates", json=template("bad", image))
        assert refused.status_code == status and words in refused.text, (image, refused.text)
        assert "spec.containers[0].image" in refused.text, refused.text
    assert (await api.get(f"{A}/templates/bad")).status_code == 404
    assert await stored_state(api_store) == before
