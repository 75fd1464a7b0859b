"""Secrets through the REST API on a real PostgreSQL (issue 28): a value goes in once and never
comes out, not in any answer, not in the clear in the database; the store holds it sealed
(AES-256-GCM) under the suite's key, bound to the secret's atespace and name; bad input is
refused naming the field and changes nothing; a rotation re-seals under the new primary key."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tests.api.conftest import api_process
from tests.credentials import BOOTSTRAP_TOKEN, SUITE_SECRET_KEY

S = "/v1/atespaces/vault/secrets"
VALUE = "sk-live-0123456789-the-model-key"


@pytest.fixture
async def atespace(api: httpx.AsyncClient) -> AsyncIterator[str]:
    made = await api.post("/v1/atespaces", json={"name": "vault"})
    assert made.status_code in (201, 409), made.text
    yield "vault"
    for item in (await api.get(S)).json().get("items", []):
        await api.delete(f"{S}/{item['name']}")


async def _rows(database_url: str) -> list[asyncpg.Record]:
    connection = await asyncpg.connect(database_url)
    try:
        return list(await connection.fetch("SELECT * FROM secrets WHERE atespace = 'vault' ORDER BY name"))
    finally:
        await connection.close()


async def test_a_secret_is_stored_sealed_and_never_shown(
    api: httpx.AsyncClient, atespace: str, api_database_url: str
) -> None:
    made = await api.post(S, json={"name": "model-key", "value": VALUE})
    assert made.status_code == 201, made.text
    body = made.json()
    assert (body["name"], body["atespace"], body["size_bytes"], body["key_id"]) == ("model-key", "vault", 32, "suite1")
    assert body["created_by"] and VALUE not in made.text
    listed = await api.get(S)
    assert [s["name"] for s in listed.json()["items"]] == ["model-key"] and VALUE not in listed.text
    one = await api.get(f"{S}/model-key")
    assert one.status_code == 200 and one.json()["size_bytes"] == 32 and VALUE not in one.text
    assert "value" not in one.json() and "value_base64" not in one.json()
    [row] = await _rows(api_database_url)
    sealed = bytes(row["sealed"])
    assert VALUE.encode() not in sealed and base64.b64encode(VALUE.encode()) not in sealed
    assert not any(VALUE.encode() in bytes(v) for v in row.values() if isinstance(v, bytes | memoryview))
    # It opens with the suite's key, as AES-256-GCM with a 12-byte nonce and the secret's name as
    # associated data: the bytes are the value, sealed, and bound to vault/model-key.
    opened = AESGCM(SUITE_SECRET_KEY).decrypt(sealed[:12], sealed[12:], b"ate-secret vault/model-key")
    assert opened == VALUE.encode()
    with pytest.raises(InvalidTag):  # on another secret's row it does not open
        AESGCM(SUITE_SECRET_KEY).decrypt(sealed[:12], sealed[12:], b"ate-secret vault/other")


async def test_binary_values_a_taken_name_and_delete(api: httpx.AsyncClient, atespace: str, api_database_url: str) -> None:
    raw = bytes(range(256))
    made = await api.post(S, json={"name": "blob", "value_base64": base64.b64encode(raw).decode()})
    assert made.status_code == 201 and made.json()["size_bytes"] == 256, made.text
    [row] = await _rows(api_database_url)
    sealed = bytes(row["sealed"])
    assert AESGCM(SUITE_SECRET_KEY).decrypt(sealed[:12], sealed[12:], b"ate-secret vault/blob") == raw
    again = await api.post(S, json={"name": "blob", "value": "other"})
    assert (again.status_code, again.json()["reason"]) == (409, "AlreadyExists")
    assert again.json()["message"] == (
        "atespace vault already has a secret named blob; delete it first ('ate delete secret blob -a vault')"
    )
    assert bytes((await _rows(api_database_url))[0]["sealed"]) == sealed  # the refusal changed nothing
    assert (await api.delete(f"{S}/blob")).status_code == 204
    gone = await api.get(f"{S}/blob")
    assert (gone.status_code, gone.json()["message"]) == (
        404, "secret blob not found in atespace vault (see 'ate get secrets -a vault')",
    )  # fmt: skip
    assert (await api.delete(f"{S}/blob")).status_code == 404
    nowhere = await api.get("/v1/atespaces/nowhere/secrets")
    assert (nowhere.status_code, nowhere.json()["message"]) == (404, "atespace nowhere not found")
    assert await _rows(api_database_url) == []


async def test_bad_secrets_are_refused_naming_the_field(
    api: httpx.AsyncClient, atespace: str, api_database_url: str
) -> None:
    cases = [
        ({"name": "x"}, "value", "give exactly one of value and value_base64"),
        ({"name": "x", "value": "a", "value_base64": "YQ=="}, "value", "give exactly one of value and value_base64"),
        ({"name": "x", "value": ""}, "value", "value is empty"),
        ({"name": "x", "value_base64": "not base64!"}, "value_base64", "value_base64 is not base64"),
        ({"name": "x", "value": "é" * 6145}, "value", "is 12290 bytes; a secret holds at most 12288 bytes"),
        ({"name": "Model_Key", "value": "a"}, "name", "name"),
        ({"name": "x", "value": "a", "type": "Opaque"}, "type", ""),
    ]
    for body, field, words in cases:
        answer = await api.post(S, json=body)
        assert answer.status_code == 400, (body, answer.text)
        details = answer.json()["details"]
        fields = [details.get("field")] + [f["field"] for f in details.get("fields", [])]
        assert field in fields, answer.text
        assert words in answer.json()["message"], answer.text
    assert await _rows(api_database_url) == []  # nothing was stored


async def test_a_secret_value_of_the_largest_size_is_taken(api: httpx.AsyncClient, atespace: str) -> None:
    # 12 KiB: as text, and in base64 (16384 characters, the longest string a body may carry).
    made = await api.post(S, json={"name": "big", "value": "a" * 12 * 1024})
    assert made.status_code == 201 and made.json()["size_bytes"] == 12288, made.text
    raw = base64.b64encode(bytes(12 * 1024)).decode()
    assert len(raw) == 16384
    made = await api.post(S, json={"name": "big-binary", "value_base64": raw})
    assert made.status_code == 201 and made.json()["size_bytes"] == 12288, made.text


async def test_a_rotation_reseals_every_secret_under_the_new_primary_key(
    api: httpx.AsyncClient, atespace: str, api_database_url: str, tmp_path_factory: pytest.TempPathFactory,
    temporal_address: str,
) -> None:
    assert (await api.post(S, json={"name": "r1", "value": "first"})).status_code == 201
    assert (await api.post(S, json={"name": "r2", "value": "second"})).status_code == 201
    assert {r["key_id"] for r in await _rows(api_database_url)} == {"suite1"}
    new_key = bytes(range(100, 132))
    ring = tmp_path_factory.mktemp("ring") / "secret-keys"
    ring.write_text(f"suite2 {base64.b64encode(new_key).decode()}\nsuite1 {base64.b64encode(SUITE_SECRET_KEY).decode()}\n")
    with api_process(tmp_path_factory.mktemp("api2"), api_database_url, temporal_address,
                     ATE_SECRET_KEYS_FILE=str(ring)) as second, second.client() as http:  # fmt: skip
        for _ in range(100):  # the new api-server re-seals at its start, in the background
            if {r["key_id"] for r in await _rows(api_database_url)} == {"suite2"}:
                break
            await asyncio.sleep(0.1)
        rows = await _rows(api_database_url)
        assert {r["name"]: r["key_id"] for r in rows} == {"r1": "suite2", "r2": "suite2"}
        for row, value in zip(rows, (b"first", b"second"), strict=True):
            sealed = bytes(row["sealed"])
            assert AESGCM(new_key).decrypt(sealed[:12], sealed[12:], f"ate-secret vault/{row['name']}".encode()) == value
        listed = http.get(S, headers=second.bootstrap).json()["items"]
        assert [(s["name"], s["key_id"]) for s in listed] == [("r1", "suite2"), ("r2", "suite2")]
        made = http.post(S, json={"name": "r3", "value": "third"}, headers=second.bootstrap)
        assert made.status_code == 201 and made.json()["key_id"] == "suite2", made.text


async def test_an_api_server_without_a_key_ring_says_how_to_give_it_one(
    tmp_path_factory: pytest.TempPathFactory, api_database_url: str, temporal_address: str
) -> None:
    with api_process(tmp_path_factory.mktemp("api3"), api_database_url, temporal_address,
                     ATE_SECRET_KEYS="") as bare, bare.client() as http:  # fmt: skip
        answer = http.post(S, json={"name": "x", "value": "a"}, headers=bare.bootstrap)
        assert (answer.status_code, answer.json()["reason"]) == (503, "Unavailable"), answer.text
        assert "ATE_SECRET_KEYS_FILE" in answer.json()["message"] and "restart" in answer.json()["message"]


def _ate(api_url: str, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "ATE_SERVER": api_url, "ATE_TOKEN": BOOTSTRAP_TOKEN, "ATE_CONFIG": os.devnull}
    return subprocess.run([str(Path(sys.executable).parent / "ate"), *args], input=stdin, env=env,
                          capture_output=True, timeout=60)  # fmt: skip


async def test_the_cli_creates_lists_and_deletes_secrets_and_never_prints_a_value(
    api_server: Any, atespace: str, tmp_path: Path, api_database_url: str
) -> None:
    made = _ate(api_server.url, "create", "secret", "model-key", "-a", "vault", "--from-literal", VALUE)
    assert made.returncode == 0, made.stderr
    assert made.stdout.decode() == "secret/model-key created (32 bytes)\n"
    raw = bytes(range(256))
    (tmp_path / "blob").write_bytes(raw)
    assert _ate(api_server.url, "create", "secret", "blob", "-a", "vault", "--from-file", str(tmp_path / "blob")).returncode == 0
    piped = _ate(api_server.url, "create", "secret", "piped", "-a", "vault", "--from-file", "-", stdin=b"from-stdin")
    assert piped.returncode == 0, piped.stderr
    rows = {r["name"]: r for r in await _rows(api_database_url)}
    assert {n: r["size_bytes"] for n, r in rows.items()} == {"blob": 256, "model-key": 32, "piped": 10}
    sealed = bytes(rows["blob"]["sealed"])
    assert AESGCM(SUITE_SECRET_KEY).decrypt(sealed[:12], sealed[12:], b"ate-secret vault/blob") == raw
    listed = _ate(api_server.url, "get", "secrets", "-a", "vault")
    lines = listed.stdout.decode().splitlines()
    assert lines[0].split() == ["NAME", "TYPE", "SIZE", "KEY", "CREATED-BY", "AGE"]
    assert [line.split()[:5] for line in lines[1:]] == [
        ["blob", "opaque", "256", "B", "suite1"], ["model-key", "opaque", "32", "B", "suite1"],
        ["piped", "opaque", "10", "B", "suite1"],
    ]  # fmt: skip
    as_yaml = _ate(api_server.url, "get", "secrets", "-a", "vault", "-o", "yaml")
    assert as_yaml.returncode == 0 and VALUE.encode() not in as_yaml.stdout and b"size_bytes: 32" in as_yaml.stdout
    both = _ate(api_server.url, "create", "secret", "x", "-a", "vault", "--from-literal", "a", "--from-file", "-")
    refusal = re.sub(r"[\s│╭╮╰╯─]+", " ", both.stderr.decode())  # unboxed, unwrapped
    assert both.returncode == 2 and "give --from-literal or --from-file (one of them)" in refusal, refusal
    assert _ate(api_server.url, "delete", "secret", "piped", "-a", "vault").stdout == b"secret/piped deleted\n"
    missing = _ate(api_server.url, "delete", "secret", "piped", "-a", "vault")
    assert missing.returncode != 0 and b"secret piped not found in atespace vault" in missing.stderr
