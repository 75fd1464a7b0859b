"""The typed actor template spec: parsed once from the validated document, and back unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from api.template_spec import TemplateSpec
from domain.states import SnapshotScope
from domain.templates import ActorTemplateSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "counter"


def validated(path: Path) -> dict[str, Any]:
    """The document the API stores for a template file (pydantic dump without None)."""
    spec = yaml.safe_load(path.read_text())["spec"]
    return TemplateSpec.model_validate(spec).model_dump(mode="json", exclude_none=True)


@pytest.mark.parametrize("name", ["template.yaml", "template-data.yaml"])
def test_a_stored_document_round_trips(name: str) -> None:
    document = validated(EXAMPLES / name)
    assert ActorTemplateSpec.from_document(document).document() == document


def test_the_counter_template_as_placement_and_the_atelet_read_it() -> None:
    spec = ActorTemplateSpec.from_document(validated(EXAMPLES / "template.yaml"))
    # examples/counter/template.yaml: cpu 500m, memory 256Mi, probe GET /readyz on 8080
    assert (spec.limits.cpu_millis, spec.limits.memory_bytes) == (500, 256 * 2**20)
    assert spec.sandbox_class == "gvisor" and spec.worker_selector == {}
    [counter] = spec.containers
    assert (counter.name, counter.command, counter.port) == ("counter", ["/counter"], 8080)
    assert counter.wakeup_probe is not None and (counter.wakeup_probe.path, counter.wakeup_probe.port) == ("/readyz", 8080)
    assert [(m.name, m.mount_path) for m in counter.volume_mounts] == [("data", "/data")]
    assert [(v.name, v.durable_dir) for v in spec.volumes] == [("data", True)]
    assert (spec.snapshot_config.on_pause, spec.snapshot_config.on_commit) == (SnapshotScope.FULL, SnapshotScope.FULL)
    data = ActorTemplateSpec.from_document(validated(EXAMPLES / "template-data.yaml"))
    assert data.snapshot_config.on_commit == SnapshotScope.DATA


@pytest.mark.parametrize(
    ("container", "port"),
    [
        ({"name": "a", "image": "oci:a:latest", "port": 9000, "wakeupProbe": {"httpGet": {"port": 8080}}}, 9000),
        ({"name": "a", "image": "oci:a:latest", "wakeupProbe": {"httpGet": {"port": 8080}}}, 8080),
        ({"name": "a", "image": "oci:a:latest"}, 80),
    ],
)
def test_the_serving_port_is_the_port_else_the_probe_port_else_80(container: dict[str, Any], port: int) -> None:
    assert ActorTemplateSpec.from_document({"containers": [container]}).serving_port == port


def test_a_document_that_is_not_a_spec_is_refused() -> None:
    with pytest.raises(ValueError, match="not an actor template spec"):
        ActorTemplateSpec.from_document({"containers": [{"image": "oci:a:latest"}]})  # no name
    with pytest.raises(ValueError, match="not a CPU quantity"):
        ActorTemplateSpec.from_document(
            {"containers": [{"name": "a", "image": "oci:a:latest"}], "resources": {"limits": {"cpu": "lots"}}}
        )
