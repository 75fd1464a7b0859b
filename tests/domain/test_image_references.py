"""Registry image references (`domain.image_references`): the distribution project's grammar and
Kubernetes' defaults, with expected values written from that grammar by hand."""

from __future__ import annotations

import pytest

from domain.image_references import RegistryImage, is_registry_reference, parse_registry_image

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(("text", "expected"), [
    ("registry.example.com/team/agent:v3", RegistryImage("registry.example.com", "team/agent", "v3")),
    (f"registry.example.com:5000/team/agent@{DIGEST}", RegistryImage("registry.example.com:5000", "team/agent", None, DIGEST)),
    (f"127.0.0.1:5000/examples/counter:v1@{DIGEST}", RegistryImage("127.0.0.1:5000", "examples/counter", "v1", DIGEST)),
    ("localhost/agent", RegistryImage("localhost", "agent", "latest")),
    ("python:3.12", RegistryImage("docker.io", "library/python", "3.12")),
    ("team/agent", RegistryImage("docker.io", "team/agent", "latest")),
    ("[::1]:5000/a/b_c.d-e__f:x", RegistryImage("[::1]:5000", "a/b_c.d-e__f", "x")),
])  # fmt: skip
def test_references_parse_with_the_registrys_defaults(text: str, expected: RegistryImage) -> None:
    assert parse_registry_image(text) == expected


@pytest.mark.parametrize(("text", "words"), [
    ("", "empty"),
    ("registry.example.com/Team/agent:v3", "path component 'Team'"),
    ("registry.example.com/team/agent:-v3", "the tag '-v3'"),
    ("registry.example.com/team/agent@sha256:abc", "the digest 'sha256:abc'"),
    ("registry.example.com/team//agent", "path component ''"),
    ("reg_istry.example.com/agent", "not a registry host"),
    ("team/agent v3", "spaces"),
])  # fmt: skip
def test_a_malformed_reference_is_refused_saying_which_part(text: str, words: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_registry_image(text)
    assert words in str(raised.value)


def test_a_pinned_image_keeps_its_tag_for_the_reader_and_pulls_by_digest() -> None:
    image = parse_registry_image("127.0.0.1:5000/examples/counter:v1").pinned(DIGEST)
    assert str(image) == f"127.0.0.1:5000/examples/counter:v1@{DIGEST}"
    assert image.transport_reference() == f"docker://127.0.0.1:5000/examples/counter@{DIGEST}"
    assert parse_registry_image("a.b/c:d").transport_reference() == "docker://a.b/c:d"
    assert parse_registry_image(str(image)) == image  # what is recorded parses back to itself


def test_loopback_registries_are_told_apart() -> None:
    assert [parse_registry_image(t).loopback for t in ("localhost:5000/a", "127.0.0.1:5000/a", "[::1]:5000/a",
                                                        "127.1.2.3/a", "registry.example.com/a", "10.0.0.1:5000/a")] == [
        True, True, True, True, False, False]  # fmt: skip
    assert not is_registry_reference("oci:examples/counter/oci:latest") and is_registry_reference("a.b/c:d")
