"""Template files are checked as a whole before anything is sent."""

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.template_spec import TemplateSpec
from ate.cli.main import app
from ate.cli.manifest import ManifestError, load_template_spec

from .conftest import ServerThread

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
EXAMPLE_TEMPLATES = sorted(REPO.glob("examples/*/template*.yaml"))

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


@pytest.mark.parametrize("path", EXAMPLE_TEMPLATES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_example_template_is_one_the_api_accepts(path: Path) -> None:
    TemplateSpec.model_validate(load_template_spec(path, path.stem))


def test_the_microvm_counter_is_the_counter_in_a_vm_of_one_cpu() -> None:
    """examples/counter/template-microvm.yaml: template.yaml with sandboxClass microvm and 1 CPU
    (a VM's vCPUs are whole; its 256Mi are its RAM)."""
    assert REPO / "examples/counter/template-microvm.yaml" in EXAMPLE_TEMPLATES
    counter = load_template_spec(REPO / "examples/counter/template.yaml", "counter")
    microvm = load_template_spec(REPO / "examples/counter/template-microvm.yaml", "counter")
    assert microvm == {
        **counter,
        "sandboxClass": "microvm",
        "resources": {"limits": {"cpu": "1", "memory": "256Mi"}},
    }
    assert TemplateSpec.model_validate(microvm).sandboxClass == "microvm"


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


def billion_laughs() -> str:
    """Nine levels of nine aliases: 9**9 strings once expanded, in under 400 bytes of YAML."""
    text = 'spec:\n  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for level, previous in zip("bcdefghi", "abcdefgh", strict=True):
        text += f"  {level}: &{level} [" + ",".join([f"*{previous}"] * 9) + "]\n"
    return text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (billion_laughs(), "holds more than 100000 values (YAML aliases count each time they are used)"),
        ("spec: " + "[" * 100_000 + "]" * 100_000 + "\n", "line 1: nests deeper than 32 levels"),
        ("spec:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(40)) + "  " * 41 + "v: 1\n",
         "line 33: nests deeper than 32 levels"),
        ('spec: {containers: [{name: "c\\0"}]}\n', "spec.containers[0].name: must not contain NUL characters (\\u0000)"),
        ("spec: {env: {A: " + "x" * 20_000 + "}}\n", "spec.env.A: is 20000 characters long; at most 16384 are allowed"),
        ("spec: !!python/object/apply:os.system [echo]\n", "could not determine a constructor"),
    ],
)  # fmt: skip
def test_hostile_files_fail_fast_with_a_message(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ManifestError) as caught:
        load_template_spec(write(tmp_path, text), "counter")
    assert expected in str(caught.value)


def test_a_file_over_the_size_limit_is_not_read(tmp_path: Path) -> None:
    path = write(tmp_path, SPEC + "# " + "x" * (1024 * 1024) + "\n")
    with pytest.raises(ManifestError) as caught:
        load_template_spec(path, "counter")
    assert str(caught.value) == f"{path} is {path.stat().st_size} bytes; a template file may be at most 1048576 bytes"


def test_the_cli_refuses_a_billion_laughs_file_and_sends_nothing(api_server: ServerThread, tmp_path: Path) -> None:
    runner.invoke(app, ["--server", api_server.url, "create", "atespace", "laughs"])
    before = len(api_server.state.requests)
    path = str(write(tmp_path, billion_laughs()))
    result = runner.invoke(app, ["--server", api_server.url, "create", "template", "t", "-a", "laughs", "-f", path])
    assert result.exit_code == 2, result.output
    assert "holds more than 100000 values" in plain(result.stderr)
    assert api_server.state.requests[before:] == []
