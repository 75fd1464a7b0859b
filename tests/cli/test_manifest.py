"""Template files are checked as a whole before anything is sent."""

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ate.cli.main import app
from ate.cli.manifest import ManifestError, load_template_spec

from .conftest import ServerThread

runner = CliRunner()

SPEC = "spec:\n  sandboxClass: gvisor\n  containers: [{name: c, image: 'oci:x:latest'}]\n"
HEAD = "apiVersion: ate.dev/v1alpha1\nkind: ActorTemplate\n"


def plain(text: str) -> str:
    """An error as one line: without rich's box and its line breaks."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(text)
    return path


def test_a_full_manifest_gives_its_spec(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + "metadata:\n  name: counter\n" + SPEC)
    assert load_template_spec(path, "counter")["sandboxClass"] == "gvisor"
    # apiVersion, kind and metadata are optional; spec alone is a template.
    assert load_template_spec(write(tmp_path, SPEC), "counter")["sandboxClass"] == "gvisor"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (HEAD + "colour: blue\n" + SPEC, ["'colour'", "apiVersion, kind, metadata, spec"]),
        (HEAD + "sandboxClass: gvisor\nlabels: {}\n" + SPEC, ["'labels'", "'sandboxClass'", "allowed"]),
        (
            "sandboxClass: gvisor\ncontainers: []\n",
            ["'sandboxClass'", "'containers'", "apiVersion, kind, metadata, spec"],
        ),
        ("apiVersion: ate.dev/v1\nkind: ActorTemplate\n" + SPEC, ["'ate.dev/v1'", "'ate.dev/v1alpha1'"]),
        ("apiVersion: v1\nkind: Pod\n" + SPEC, ["'v1'", "'ate.dev/v1alpha1'"]),
        ("apiVersion: ate.dev/v1alpha1\nkind: Pod\n" + SPEC, ["'Pod'", "'ActorTemplate'"]),
        (HEAD + "metadata:\n  name: other\n" + SPEC, ["'other'", "'counter'"]),
        (HEAD + "metadata:\n  name: counter\n  labels: {a: b}\n" + SPEC, ["'labels'", "metadata", "name"]),
        (HEAD + "metadata: counter\n" + SPEC, ["metadata", "mapping"]),
        (HEAD, ["spec"]),
        (HEAD + "spec: [1]\n", ["spec", "mapping"]),
    ],
)
def test_bad_manifests_name_the_problem(tmp_path: Path, text: str, words: list[str]) -> None:
    with pytest.raises(ManifestError) as caught:
        load_template_spec(write(tmp_path, text), "counter")
    for word in words:
        assert word in str(caught.value), str(caught.value)


def test_the_cli_sends_nothing_for_a_bad_file(api_server: ServerThread, tmp_path: Path) -> None:
    runner.invoke(app, ["--server", api_server.url, "create", "atespace", "strict"])
    cases = {
        HEAD + "colour: blue\n" + SPEC: ["colour", "apiVersion, kind, metadata, spec"],
        "apiVersion: ate.dev/v2\nkind: ActorTemplate\n" + SPEC: ["ate.dev/v2", "ate.dev/v1alpha1"],
        HEAD + "metadata: {name: not-counter}\n" + SPEC: ["not-counter", "counter"],
    }
    for text, words in cases.items():
        before = len(api_server.state.requests)
        result = runner.invoke(
            app,
            [
                "--server",
                api_server.url,
                "create",
                "template",
                "counter",
                "-a",
                "strict",
                "-f",
                str(write(tmp_path, text)),
            ],
        )
        assert result.exit_code == 2, result.output
        message = plain(result.stderr)
        for word in words:
            assert word in message, message
        assert "created" not in result.output
        assert api_server.state.requests[before:] == []
    assert ("strict", "counter") not in api_server.state.templates
