"""Every client command end to end against the fake API over real HTTP."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from ate.cli.main import app

from .conftest import ServerThread

runner = CliRunner()

TEMPLATE_YAML = """\
apiVersion: ate.dev/v1alpha1
kind: ActorTemplate
spec:
  sandboxClass: gvisor
  containers:
    - name: counter
      image: examples/counter/oci:latest
  resources:
    limits: {cpu: 500m, memory: 256Mi}
"""


@pytest.fixture
def ate(api_server: ServerThread):
    """Run `ate --server <fake> ARGS...`."""

    def invoke(*args: str):
        return runner.invoke(app, ["--server", api_server.url, *args], env={"ATE_ATESPACE": None})

    return invoke


def test_tour(ate, api_server: ServerThread, tmp_path: Path) -> None:
    result = ate("create", "atespace", "demo")
    assert (result.exit_code, result.stdout) == (0, "atespace/demo created\n")
    assert ate("create", "atespace", "demo").stderr == "error: atespace demo already exists\n"

    template_file = tmp_path / "template.yaml"
    template_file.write_text(TEMPLATE_YAML)
    result = ate("create", "template", "counter", "-a", "demo", "-f", str(template_file))
    assert result.exit_code == 0, result.output
    assert result.stdout == "template/counter created (Ready)\n"
    assert result.stderr == "template/counter: created, waiting for Ready (golden snapshot)...\n"
    sent = api_server.state.templates[("demo", "counter")]
    assert sent["spec"]["containers"][0]["image"] == "examples/counter/oci:latest"
    assert "kind" not in sent["spec"] and "metadata" not in sent["spec"]
    # Created at once (201, Pending), then polled until Ready.
    assert ("POST", "/v1/atespaces/demo/templates", "") in api_server.state.requests
    assert ("GET", "/v1/atespaces/demo/templates/counter", "") in api_server.state.requests

    result = ate(
        "create",
        "actor",
        "c1",
        "-a",
        "demo",
        "--template",
        "counter",
        "--selector",
        "zone=a",
        "--selector",
        "disk=ssd",
        "-o",
        "json",
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["worker_selector"] == {"zone": "a", "disk": "ssd"}

    result = ate("resume", "actor", "c1", "-a", "demo")
    assert result.stdout == "actor/c1 resumed: RUNNING on w-0 (10.77.0.2)\n"
    result = ate("get", "actor", "c1", "-a", "demo")
    header, row = result.stdout.splitlines()
    assert header.split() == [
        "ATESPACE",
        "NAME",
        "TEMPLATE",
        "STATE",
        "WORKER",
        "POD",
        "WORKER",
        "IPS",
        "VERSION",
        "AGE",
    ]
    assert row.split()[:7] == ["demo", "c1", "counter", "RUNNING", "w-0", "10.77.0.2", "2"]

    result = ate("suspend", "actor", "c1", "-a", "demo", "-o", "yaml")
    assert yaml.safe_load(result.stdout)["state"] == "SUSPENDED"

    assert ate("delete", "atespace", "demo").stderr == "error: atespace demo is not empty\n"
    assert ate("delete", "actor", "c1", "-a", "demo").stdout == "actor/c1 deleted\n"
    assert ate("get", "actor", "c1", "-a", "demo").stderr == "error: actor demo/c1 not found\n"


def test_template_failed_and_no_wait(ate, api_server: ServerThread, tmp_path: Path) -> None:
    ate("create", "atespace", "tpl")
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: ActorTemplate\nspec:\n  sandboxClass: gvisor\n")
    result = ate("create", "template", "broken", "-a", "tpl", "-f", str(bad))
    assert result.exit_code == 1
    assert result.stdout == "template/broken Failed: spec.containers: at least one container is required\n"
    result = ate("get", "templates", "-a", "tpl")
    header, row = result.stdout.splitlines()
    assert header.split() == ["ATESPACE", "NAME", "PHASE", "SANDBOX", "CLASS", "AGE", "REASON"]
    assert row.split()[:3] == ["tpl", "broken", "Failed"]
    assert row.endswith("   spec.containers: at least one container is required")

    long_reason = "golden snapshot failed: " + "x" * 300
    api_server.state.templates[("tpl", "broken")]["reason"] = long_reason
    row = ate("get", "templates", "-a", "tpl").stdout.splitlines()[1]
    assert len(row) < 150 and row.endswith("golden snapshot failed: " + "x" * 35 + "…")
    assert ate("get", "template", "broken", "-a", "tpl").stdout.splitlines()[1].endswith(long_reason)
    assert json.loads(ate("get", "templates", "-a", "tpl", "-o", "json").stdout)["items"][0]["reason"] == long_reason
    assert yaml.safe_load(ate("get", "template", "broken", "-a", "tpl", "-o", "yaml").stdout)["reason"] == long_reason

    good = tmp_path / "good.yaml"
    good.write_text(TEMPLATE_YAML)
    result = ate("create", "template", "later", "-a", "tpl", "-f", str(good), "--no-wait")
    assert (result.exit_code, result.stdout) == (0, "template/later created (Pending)\n")

    refused = ate("create", "template", "counter", "-a", "no-such-space", "-f", str(good))
    assert (refused.exit_code, refused.stdout) == (1, "")
    assert refused.stderr == "error: atespace no-such-space not found\n"  # no "created" before the refusal
    taken = ate("create", "template", "later", "-a", "tpl", "-f", str(good))
    assert (taken.exit_code, taken.stderr) == (1, "error: template tpl/later already exists\n")

    wrong_kind = tmp_path / "pod.yaml"
    wrong_kind.write_text("kind: Pod\nspec: {}\n")
    result = ate("create", "template", "x", "-a", "tpl", "-f", str(wrong_kind))
    assert result.exit_code == 2
    assert "ActorTemplate" in result.stderr


def test_get_actors_follows_pages(ate) -> None:
    for space in ("p1", "p2"):
        ate("create", "atespace", space)
    for i in range(7):
        assert ate("create", "actor", f"a{i}", "-a", "p1", "--template", "t").exit_code == 0
    ate("create", "actor", "b0", "-a", "p2", "--template", "t")

    result = ate("get", "actors", "-a", "p1", "-o", "json")
    names = [a["name"] for a in json.loads(result.stdout)["items"]]
    assert names == [f"a{i}" for i in range(7)]  # three pages of at most three

    result = ate("get", "actors", "-A")
    rows = result.stdout.splitlines()[1:]
    assert {r.split()[0] for r in rows} >= {"p1", "p2"}
    assert sum(1 for r in rows if r.split()[0] in ("p1", "p2")) == 8

    result = ate("get", "actors", "-a", "empty-space")
    assert result.exit_code == 1

    ate("create", "atespace", "nothing")
    result = ate("get", "actors", "-a", "nothing")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "No actors found in atespace nothing.\n")


def test_get_workers_and_atespaces(ate, api_server: ServerThread) -> None:
    api_server.state.workers[:] = [
        {
            "pool": "default",
            "name": "vm-w-0",
            "node": "vm",
            "ip": "10.77.0.2",
            "sandbox_class": "gvisor",
            "labels": {},
            "state": "ACTIVE",
            "places": 1,
            "used_places": 1,
            "cpu_millis": 1000,
            "memory_bytes": 1 << 30,
            "actors": ["demo/c1"],
        },
    ]
    result = ate("get", "workers")
    assert result.stdout.splitlines()[0].split() == ["POOL", "WORKER", "NODE", "IP", "STATE", "ACTORS", "REASON"]
    assert result.stdout.splitlines()[1].split() == ["default", "vm-w-0", "vm", "10.77.0.2", "ACTIVE", "1/1", "<none>"]

    ate("create", "atespace", "listed")
    result = ate("get", "atespaces")
    assert result.stdout.splitlines()[0].split() == ["NAME", "AGE"]
    assert any(line.split()[0] == "listed" for line in result.stdout.splitlines()[1:])
    assert yaml.safe_load(ate("get", "atespaces", "-o", "yaml").stdout)["items"]


def test_process_commands_forward_args(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr("ate.cli.processes.run_process", lambda module, argv: calls.append((module, argv)))
    runner.invoke(app, ["api-server", "--host", "127.0.0.1", "--port", "9", "--help"])
    runner.invoke(app, ["worker"])
    runner.invoke(app, ["atelet", "--node", "n1", "--workers", "2"])
    runner.invoke(app, ["router", "--listen", "127.0.0.1:8000"])
    assert calls == [
        ("api.main", ["--host", "127.0.0.1", "--port", "9", "--help"]),
        ("temporal_worker.main", []),
        ("atelet.main", ["--node", "n1", "--workers", "2"]),
        ("router.main", ["--listen", "127.0.0.1:8000"]),
    ]


def test_create_template_says_when_its_golden_snapshot_waits_for_a_worker(api_server, ate, tmp_path: Path) -> None:
    assert ate("create", "atespace", "busy").exit_code == 0
    template_file = tmp_path / "template.yaml"
    template_file.write_text(TEMPLATE_YAML)
    result = ate("create", "template", "slow", "-a", "busy", "-f", str(template_file))
    assert (result.exit_code, result.stdout) == (0, "template/slow created (Ready)\n")
    # Said once, not at every poll: the growing seconds are no news.
    assert result.stderr == (
        "template/slow: created, waiting for Ready (golden snapshot)...\n"
        "template/slow: waiting for a free worker (10 s so far): no worker has room for the golden boot of "
        "template busy/slow: 2 workers: 2 full\n"
    )
