"""`ate get snapshots` rows (ate/cli/output.py): sizes the way `ls -h` reads them, WHERE a node
for a local snapshot and `store` otherwise, KEPT-BY joined, `-` for nothing."""

from __future__ import annotations

from datetime import UTC, datetime

from ate.cli.output import human_bytes, snapshot_row

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def test_a_row_says_size_place_and_what_keeps_it() -> None:
    local = {"id": 7, "owner_kind": "actor", "owner": "c1", "generation": 3, "scope": "FULL", "state": "COMPLETED",
             "size_bytes": 3 * 1024 * 1024 + 300 * 1024, "storage": "LOCAL", "node": "n1",
             "kept_by": ["paused", "tag good"], "created_at": "2026-12-07T11:58:00+00:00"}  # fmt: skip
    assert snapshot_row(local, NOW) == ["7", "actor/c1", "3", "FULL", "COMPLETED", "3.3Mi", "node n1",
                                        "paused,tag:good", "2m"]  # fmt: skip
    loose = local | {"storage": "EXTERNAL", "kept_by": [], "size_bytes": None}
    assert snapshot_row(loose, NOW)[5:8] == ["-", "store", "-"]
    assert [human_bytes(n) for n in (512, 2048, 5 * 2**30)] == ["512B", "2.0Ki", "5.0Gi"]
