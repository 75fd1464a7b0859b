"""The CLI's egress: `--egress-file` reads a policy (YAML or JSON) and refuses what is not one,
naming the option; `ate describe actor` lists the rules in force and where they come from."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from ate.cli.egress import egress_lines, read_egress_file

TEMPLATE = {"egress": {"allow": [{"host": "api.model.test", "ports": [443]}, {"cidr": "10.20.0.0/16", "ports": [5432]}],
                       "credentials": [{"host": "api.model.test", "header": "x-api-key", "secret": "model-key"}]}}  # fmt: skip


def test_a_policy_file_in_yaml_or_json_and_a_bad_one(tmp_path: Path) -> None:
    yaml_file = tmp_path / "p.yaml"
    yaml_file.write_text("allow:\n  - {host: files.pypi.test, ports: [443]}\n")
    assert read_egress_file(yaml_file) == {"allow": [{"host": "files.pypi.test", "ports": [443]}]}
    json_file = tmp_path / "p.json"
    json_file.write_text('{"allow": []}')
    assert read_egress_file(json_file) == {"allow": []}
    empty = tmp_path / "none.yaml"
    empty.write_text("")
    assert read_egress_file(empty) == {}  # none for the actor
    assert read_egress_file(None) is None
    listed = tmp_path / "list.yaml"
    listed.write_text("- host: a.test\n")
    with pytest.raises(typer.BadParameter, match="must hold a mapping with allow and credentials"):
        read_egress_file(listed)
    with pytest.raises(typer.BadParameter, match="cannot read"):
        read_egress_file(tmp_path / "missing.yaml")


def test_describe_shows_the_rules_in_force_and_their_source() -> None:
    assert egress_lines({"egress": None}, TEMPLATE) == [
        "Egress:           2 rule(s) (from the template), through its node's egress proxy",
        "  allow api.model.test ports 443",
        "  allow 10.20.0.0/16 ports 5432",
        "  credential x-api-key from secret model-key on api.model.test",
    ]
    own = {"egress": {"allow": [{"host": "api.model.test", "ports": [443]}], "credentials": []}}
    assert egress_lines(own, TEMPLATE)[0] == "Egress:           1 rule(s) (from the actor), through its node's egress proxy"
    assert egress_lines({"egress": None}, {}) == ["Egress:           <none> (it cannot connect out)"]
    assert egress_lines({"egress": {"allow": [], "credentials": []}}, TEMPLATE) == [
        "Egress:           <none> (it cannot connect out) (its own)"
    ]
