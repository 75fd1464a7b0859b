"""Template images from a container registry through the REST API (issue 29): a real registry on
loopback (tests/registry.py) holds the example counter; a template naming it by tag is recorded
pinned to the digest the push produced; a missing tag, a registry that is down, a malformed
reference and an image built for another architecture are refused naming the field, and nothing
is stored."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from domain.image_references import RUNTIME_PLATFORM
from store import Store
from tests.api.conftest import stored_state
from tests.api.test_egress import As
from tests.atelet.conftest import REPO, build_counter_image
from tests.credentials import node_token
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


async def register_node(api: httpx.AsyncClient, node: str, ip: str, sandbox_class: str = "gvisor") -> None:
    """Node `node` with one worker at `ip` of `sandbox_class` (registered as the suite's admin)."""
    worker = {"name": "default-0", "pool": "default" if sandbox_class == "gvisor" else "vms", "ip": ip,
              "cpu_millis": 1000, "memory_bytes": 2**30, "sandbox_class": sandbox_class}  # fmt: skip
    registered = await api.put(f"/v1/nodes/{node}", json={"address": "10.0.0.9:8085", "workers": [worker]})
    assert registered.status_code == 200, registered.text


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
        # the suite's api-server takes images from loopback registries only (tests/conftest.py)
        ("registry.example.com/team/agent:v1", 400, "registry registry.example.com is not one this cluster takes"),
    ]
    for image, status, words in cases:
        refused = await api.post(f"{A}/templates", json=template("bad", image))
        assert refused.status_code == status and words in refused.text, (image, refused.text)
        assert "spec.containers[0].image" in refused.text, refused.text
    assert (await api.get(f"{A}/templates/bad")).status_code == 404
    assert await stored_state(api_store) == before


async def test_an_image_for_another_architecture_is_refused_naming_both_platforms(
    api: httpx.AsyncClient, api_store: Store, atespace: str, registry: tuple[LocalRegistry, str], tmp_path: Path
) -> None:
    running, _ = registry
    layout = tmp_path / "counter-oci"
    build_counter_image()
    shutil.copytree(REPO / "examples/counter/oci", layout)
    # The same image with its config saying arm64 (or amd64 on an arm64 machine): another platform.
    other = "amd64" if RUNTIME_PLATFORM == "linux/arm64" else "arm64"
    subprocess.run(["umoci", "config", "--image", f"{layout}:latest", "--architecture", other, "--tag", other],
                   check=True, capture_output=True)  # fmt: skip
    running.push(f"oci:{layout}:{other}", f"examples/counter:{other}")
    before = await stored_state(api_store)
    refused = await api.post(f"{A}/templates", json=template("foreign", f"{running.address}/examples/counter:{other}"))
    assert refused.status_code == 400, refused.text
    problem = refused.json()
    assert problem["details"]["problem"] == "not for this platform", problem
    assert f"linux/{other}" in problem["message"] and RUNTIME_PLATFORM in problem["message"], problem
    assert "spec.containers[0].image" in problem["message"], problem
    assert (await api.get(f"{A}/templates/foreign")).status_code == 404
    assert await stored_state(api_store) == before


async def test_a_node_learns_the_registry_images_of_the_templates_it_can_run(
    api: httpx.AsyncClient, atespace: str, registry: tuple[LocalRegistry, str]
) -> None:
    running, pushed = registry
    made = await api.post(f"{A}/templates", json=template("prepulled", f"{running.address}/examples/counter:v1"))
    assert made.status_code in (201, 409), made.text
    local = await api.post(f"{A}/templates", json=template("local", "oci:examples/counter/oci:latest"))
    assert local.status_code in (201, 409), local.text
    await register_node(api, "img1", "10.98.7.2")
    await register_node(api, "img2", "10.98.8.2", "microvm")
    images = (await api.get("/v1/nodes/img1/images", auth=As(node_token("img1")))).json()["images"]
    assert f"{running.address}/examples/counter:v1@{pushed}" in images
    assert not [i for i in images if i.startswith("oci:")]  # local layouts are the atelets' own
    assert f"{running.address}/examples/counter:v1@{pushed}" not in (
        await api.get("/v1/nodes/img2/images", auth=As(node_token("img2")))).json()["images"]  # a microvm node
    assert (await api.get("/v1/nodes/img1/images", auth=As(node_token("img2")))).status_code == 403


async def test_a_pending_template_shows_the_nodes_pulls_of_its_image(
    api: httpx.AsyncClient, atespace: str, registry: tuple[LocalRegistry, str]
) -> None:
    running, pushed = registry
    made = await api.post(f"{A}/templates", json=template("pulling", f"{running.address}/examples/counter:v1"))
    assert made.status_code in (201, 409), made.text
    pinned = f"{running.address}/examples/counter:v1@{pushed}"
    await register_node(api, "puller1", "10.96.7.2")
    look = {"image": pinned, "state": "Pulling", "layers": 2, "bytes_total": 3 << 20, "bytes_done": 1 << 20}
    told = await api.put("/v1/nodes/puller1/pulls", json=look, auth=As(node_token("puller1")))
    assert told.json() == {"accepted": True}, told.text
    shown = (await api.get(f"{A}/templates/pulling")).json()
    assert shown["phase"] == "Pending", shown  # no atelet in this suite boots it
    [pull] = shown["pulls"]
    assert (pull["node"], pull["image"], pull["text"]) == ("puller1", pinned, "1.0 MiB of 3.0 MiB (2 layers)"), pull
    # a node that never registered stores nothing; more bytes than the total is refused
    assert (await api.put("/v1/nodes/ghost/pulls", json=look, auth=As(node_token("ghost")))).json() == {"accepted": False}
    over = await api.put("/v1/nodes/puller1/pulls", json=look | {"bytes_done": 4 << 20}, auth=As(node_token("puller1")))
    assert over.status_code == 400 and "bytes_done" in over.text, over.text
    assert (await api.put("/v1/nodes/puller1/pulls", json=look, auth=As(node_token("ghost")))).status_code == 403
