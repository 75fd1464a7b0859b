"""Assignment records: atomic writes, round trip, unreadable records skipped."""

from __future__ import annotations

import json
from pathlib import Path

from atelet.assignments import Assignment, AssignmentStore
from atelet.netns import plan
from tests.atelet.conftest import counter_spec


def record(worker: str = "default-0") -> Assignment:
    return Assignment(worker=worker, actor=("demo", "p1"), container_id=f"{worker}-abc", state="running",
                      net=plan("n1", worker, 0, "10.200.0.0/24"), spec=counter_spec(), operation_id="op-1",
                      operation_kind="restore", durable_dir="/s/actors/demo/p1",
                      volumes={"data": "/s/actors/demo/p1/volumes/data"}, started_at=12.5)


def test_round_trip_and_remove(tmp_path: Path) -> None:
    store = AssignmentStore(tmp_path)
    store.save(record())
    on_disk = json.loads(store.path("default-0").read_text())
    assert on_disk["probe"] == {"ip": "10.200.0.2", "port": 8080, "path": "/readyz"}
    assert on_disk["operation"] == {"id": "op-1", "kind": "restore"}
    assert [p.name for p in (tmp_path / "default-0").iterdir()] == ["assignment.json"]  # no temp file left
    loaded = store.load_all()["default-0"]
    assert loaded == record()
    store.remove("default-0")
    store.remove("default-0")  # idempotent
    assert store.load_all() == {}


def test_unreadable_records_are_skipped(tmp_path: Path) -> None:
    store = AssignmentStore(tmp_path)
    store.save(record("default-1"))
    (tmp_path / "default-0").mkdir()
    store.path("default-0").write_text("{truncated")
    assert list(store.load_all()) == ["default-1"]
    assert not store.path("default-0").exists()
