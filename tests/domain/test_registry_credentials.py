"""Registry credentials (domain.registry_credentials): the auth file containers/image reads, the
checks of each field, and a password that never shows in a repr."""

from __future__ import annotations

import json

import pytest

from domain.registry_credentials import (
    RegistryCredentials,
    auth_file,
    check_registry_credentials,
    of_document,
    parse_registry_value,
)


def test_the_auth_file_is_the_containers_auth_json_form() -> None:
    # containers-auth.json(5): "auth" is base64 of "user:password"; "puller:p@ss w0rd" by hand:
    # printf 'puller:p@ss w0rd' | base64 -> cHVsbGVyOnBAc3MgdzByZA==
    document = json.loads(auth_file(RegistryCredentials("127.0.0.1:5000", "puller", "p@ss w0rd")))
    assert document == {"auths": {"127.0.0.1:5000": {"auth": "cHVsbGVyOnBAc3MgdzByZA=="}}}


@pytest.mark.parametrize(("registry", "username", "password", "field"), [
    ("https://r.example.com", "u", "p", "registry"),
    ("r.example.com/team", "u", "p", "registry"),
    ("", "u", "p", "registry"),
    ("r.example.com", "", "p", "username"),
    ("r.example.com", "a:b", "p", "username"),
    ("r.example.com", "u", "", "password"),
    ("r.example.com", "u", "a\nb", "password"),
])  # fmt: skip
def test_each_field_is_checked(registry: str, username: str, password: str, field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}: "):
        check_registry_credentials(registry, username, password)


def test_a_value_and_a_node_document_round_trip_and_the_password_is_never_in_a_repr() -> None:
    made = check_registry_credentials("[::1]:5000", "ci", "hunter2")
    opened = parse_registry_value("[::1]:5000", made.value(), "demo/pull")
    assert (opened.registry, opened.username, opened.password, opened.secret) == ("[::1]:5000", "ci", "hunter2", "demo/pull")
    assert of_document(opened.document()) == opened
    assert "hunter2" not in repr(opened) and "hunter2" not in str(opened)
    with pytest.raises(ValueError, match="demo/x: not registry credentials"):
        parse_registry_value("r.example.com", b"an opaque value", "demo/x")
