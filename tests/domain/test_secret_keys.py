"""The key ring's text (domain.secrets.parse_secret_keys): one `<key id> <base64 of 32 bytes>` per
line, the primary first; every malformed ring is refused naming the entry and what is wrong."""

from __future__ import annotations

import base64

import pytest

from domain.secrets import SecretKeysError, key_ring_line, parse_secret_keys

K1 = base64.b64encode(b"\x01" * 32).decode()
K2 = base64.b64encode(b"\x02" * 32).decode()


def test_a_ring_keeps_its_order_skips_comments_and_takes_commas() -> None:
    keys = parse_secret_keys(f"# rotated on 2026-12-06\nk2 {K2}\n\nk1 {K1}\n")
    assert [(k.key_id, k.material) for k in keys] == [("k2", b"\x02" * 32), ("k1", b"\x01" * 32)]
    assert [k.key_id for k in parse_secret_keys(f"k2 {K2},k1 {K1}")] == ["k2", "k1"]
    assert parse_secret_keys(key_ring_line("dev1", b"\x03" * 32))[0].material == b"\x03" * 32
    assert "AQEB" not in repr(keys) and repr(keys[0]) == "SecretKey('k2')"  # no key material in a log


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "no key"),
        ("# only a comment\n", "no key"),
        (f"k1{K1}", "entry 1: want '<key id> <base64 of 32 bytes>'"),
        (f"K_1 {K1}", "key id 'K_1' must be 1-32 lowercase letters"),
        ("k1 not-base64!", "entry 1 (key k1): not base64"),
        (f"k1 {base64.b64encode(b'short').decode()}", "5 bytes, want 32"),
        (f"k1 {K1}\nk1 {K2}", "key id k1 appears twice"),
    ],
)
def test_a_malformed_ring_is_refused_naming_the_entry(text: str, words: str) -> None:
    with pytest.raises(SecretKeysError) as refused:
        parse_secret_keys(text, "secret_keys_file /etc/ate/keys")
    assert str(refused.value).startswith("secret_keys_file /etc/ate/keys") and words in str(refused.value)
