"""Snapshot storage locations a template or the api-server may name (domain.locations)."""

from __future__ import annotations

import pytest

from domain.locations import check_storage_location, is_within


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("file:///var/lib/ate/snapshots/", "file:///var/lib/ate/snapshots"),
        ("s3://ate-snapshots/prod", "s3://ate-snapshots/prod"),
        ("gs://bucket/a/b/", "gs://bucket/a/b"),
        ("az://container/prefix", "az://container/prefix"),
        ("s3://bucket", "s3://bucket"),
    ],
)
def test_accepted_locations(given: str, kept: str) -> None:
    assert check_storage_location(given) == kept


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("http://example.com/x", "must be file:///<absolute path>, s3://"),
        ("file://host/x", "a file location must be file:///<absolute path>"),
        ("s3://key:secret@bucket/x", "must not carry credentials or a port"),
        ("s3://bucket:9000/x", "must not carry credentials or a port"),
        ("s3:///x", "names no bucket"),
        ("s3://bucket/../other", "'..'"),
        ("gs://bucket/x?versionId=1", "without a query"),
    ],
)
def test_refused_locations_say_why(given: str, why: str) -> None:
    with pytest.raises(ValueError, match=why.replace("?", r"\?").replace("(", r"\(")) as err:
        check_storage_location(given)
    assert why in str(err.value)


def test_a_location_below_a_root_is_within_it_and_a_sibling_is_not() -> None:
    assert is_within("s3://b/snapshots/team", "s3://b/snapshots")
    assert is_within("s3://b/snapshots", "s3://b/snapshots")
    assert not is_within("s3://b/snapshots-other", "s3://b/snapshots")
