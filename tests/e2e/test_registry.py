"""The tour with the example counter pulled from a container registry (issue 29): a real registry on
loopback (tests/registry.py) with TLS and basic auth holds the counter; a pull secret made with
`ate create secret --type registry --password-stdin` and listed in the template's
`imagePullSecrets` lets `ate create template` record the image pinned to the digest the push
produced, and the node pull it (with the credentials it asks the API for) for the golden boot and
the actor's resumes; the actor keeps its memory across a suspend as in the tour."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.atelet.conftest import build_counter_image
from tests.e2e.conftest import REPO, Stack
from tests.registry import LocalRegistry, local_registry

pytestmark = [pytest.mark.slow, pytest.mark.runsc]
PASSWORD = "pulled-by-the-node"


@pytest.fixture(scope="module")
def registry() -> Iterator[tuple[LocalRegistry, str]]:
    with local_registry({"puller": PASSWORD}) as running:
        yield running, running.push(build_counter_image(), "examples/counter:v1")


def get(stack: Stack, actor: str) -> dict[str, object]:
    response = httpx.get(stack.router + "/", headers={"ate-target-actor": actor}, timeout=60)
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def test_the_tour_runs_the_counter_pulled_from_a_registry(
    stack: Stack, registry: tuple[LocalRegistry, str], tmp_path: Path
) -> None:
    running, pushed = registry
    document = yaml.safe_load((REPO / "examples/counter/template.yaml").read_text())
    document["spec"]["containers"][0]["image"] = f"{running.address}/examples/counter:v1"
    document["spec"]["imagePullSecrets"] = [{"name": "pull"}]
    template = tmp_path / "template.yaml"
    template.write_text(yaml.safe_dump(document))
    stack.ate("create", "atespace", "pulled", check=False)
    secret = stack.ate("create", "secret", "pull", "-a", "pulled", "--type", "registry", "--registry", running.address,
                       "--username", "puller", "--password-stdin", stdin=PASSWORD + "\n")  # fmt: skip
    assert secret.stdout.startswith("secret/pull created"), secret.stdout
    listed = stack.ate("get", "secrets", "-a", "pulled").stdout
    assert listed.splitlines()[1].split()[:2] == ["pull", f"registry/{running.address}"] and PASSWORD not in listed
    created = stack.ate("create", "template", "counter", "-a", "pulled", "-f", str(template))
    assert "Ready" in created.stdout, created.stdout
    shown = json.loads(stack.ate("get", "template", "counter", "-a", "pulled", "-o", "json").stdout)
    assert shown["spec"]["containers"][0]["image"] == f"{running.address}/examples/counter:v1@{pushed}"
    stack.ate("create", "actor", "p1", "-a", "pulled", "--template", "counter")
    try:
        assert [get(stack, "pulled/p1")["memory_count"] for _ in range(2)] == [1, 2]
        stack.ate("suspend", "actor", "p1", "-a", "pulled")
        after = get(stack, "pulled/p1")
        assert (after["memory_count"], after["file_count"]) == (3, 3)  # FULL: memory and file kept
    finally:
        stack.ate("suspend", "actor", "p1", "-a", "pulled", check=False)
