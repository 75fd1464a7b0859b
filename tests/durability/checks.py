"""The kill matrix's independent checks: what a settled actor, template and node must look like.

Everything is read without the product's own view where it can be: Postgres rows with SQL,
Temporal's record of each workflow, the atelet's Health over gRPC, the workload over HTTP at its
worker IP, the snapshot files hashed here, `runsc list` and `ip netns list` (`probes`). The API
is read only to check that it agrees.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import httpx

from tests.durability.harness import NODE, TRANSITIONAL, WORKERS, Stack
from tests.durability.probes import namespaces, runsc_containers, snapshot_dir, verify_snapshot_dir

ATESPACE = "dur"
TEMPLATE = "counter"
PORT = 8080
SETTLE_SECONDS = 60.0


def actor_path(name: str) -> str:
    return f"/v1/atespaces/{ATESPACE}/actors/{name}"


def actor_row(stack: Stack, name: str) -> dict[str, Any]:
    rows = stack.sql(
        "SELECT a.state, a.worker_id, a.latest_snapshot_id, w.name AS worker, w.ip "
        "FROM actors a LEFT JOIN workers w ON w.id = a.worker_id WHERE a.atespace = $1 AND a.name = $2",
        ATESPACE,
        name,
    )
    assert rows, f"actor {ATESPACE}/{name} is gone"
    return rows[0]


def settle_actor(stack: Stack, name: str, timeout: float = SETTLE_SECONDS) -> str:
    """Wait until no workflow of the actor is open and its state is not transitional."""
    deadline = time.monotonic() + timeout
    state, open_ = "?", True
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            state = actor_row(stack, name)["state"]
            open_ = stack.workflow_open(f"actor/{ATESPACE}/{name}")
            if not open_ and state not in TRANSITIONAL:
                return str(state)
        time.sleep(0.3)
    raise AssertionError(
        f"actor {ATESPACE}/{name} did not settle in {timeout:.0f} s: state {state}, workflow open {open_}"
    )


def settle_template(stack: Stack, name: str, timeout: float = SETTLE_SECONDS) -> str:
    deadline = time.monotonic() + timeout
    phase, open_ = "?", True
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            phase = stack.sql("SELECT phase FROM actor_templates WHERE atespace = $1 AND name = $2", ATESPACE, name)[0][
                "phase"
            ]
            open_ = stack.workflow_open(f"template/{ATESPACE}/{name}")
            if not open_ and phase != "Pending":
                return str(phase)
        time.sleep(0.3)
    raise AssertionError(f"template {ATESPACE}/{name} did not settle in {timeout:.0f} s: phase {phase}, open {open_}")


def count(stack: Stack, name: str) -> tuple[int, int]:
    """One request to the counter at the worker IP Postgres records for the actor."""
    row = actor_row(stack, name)
    assert row["state"] == "RUNNING" and row["ip"], row
    response = httpx.get(f"http://{row['ip']}:{PORT}/", timeout=10, headers={"Connection": "close"})
    assert response.status_code == 200, response.text
    body = response.json()
    return int(body["memory_count"]), int(body["file_count"])


def check_global(stack: Stack) -> None:
    """Invariants over the whole node: places, sandboxes, namespaces, latest snapshots."""
    actors = stack.sql(
        "SELECT a.atespace, a.name, a.state, a.worker_id, w.name AS worker FROM actors a "
        "LEFT JOIN workers w ON w.id = a.worker_id"
    )
    stuck = [f"{a['atespace']}/{a['name']} {a['state']}" for a in actors if a["state"] in TRANSITIONAL]
    assert not stuck, f"actors left in a transitional state: {stuck}"
    pending = stack.sql("SELECT atespace, name FROM actor_templates WHERE phase = 'Pending'")
    assert not pending, f"templates left Pending: {pending}"

    running = {f"{a['atespace']}/{a['name']}": a for a in actors if a["state"] == "RUNNING"}
    holders = {r["holder"]: r for r in stack.sql("SELECT holder, worker_id FROM placements")}
    assert set(holders) == {f"actor/{k}" for k in running}, (
        f"placements {sorted(holders)} != RUNNING actors {sorted(running)}"
    )
    for key, a in running.items():
        assert holders[f"actor/{key}"]["worker_id"] == a["worker_id"], f"{key}: placement on another worker"

    workers = [w for w in stack.rest("GET", "/v1/workers").json()["items"] if w["node"] == NODE]
    assert len(workers) == WORKERS, workers
    by_worker = {w["name"]: w for w in workers}
    for w in workers:
        mine = [k for k, a in running.items() if a["worker"] == w["name"]]
        assert w["used_places"] == len(mine), f"worker {w['name']}: used_places {w['used_places']}, runs {mine}"

    health = {w.name: w for w in stack.health().workers}
    assert set(health) == set(by_worker), f"atelet workers {sorted(health)} != registered {sorted(by_worker)}"
    for wname, status in health.items():
        on_it = [k for k, a in running.items() if a["worker"] == wname]
        seen = f"{status.actor.atespace}/{status.actor.name}" if status.actor.name else None
        if on_it:
            assert seen == on_it[0] and status.sandbox_state == "running", (
                f"worker {wname} should run {on_it[0]}; atelet says {seen} ({status.sandbox_state})"
            )
        else:
            assert seen is None or status.sandbox_state != "running", (
                f"worker {wname} runs {seen}, not RUNNING in Postgres"
            )

    deadline = time.monotonic() + 10  # sandboxes are deleted in the background after a stop
    while True:
        containers = runsc_containers(stack)
        if len(containers) == len(running) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(containers) == len(running), f"runsc sandboxes {containers} for RUNNING actors {sorted(running)}"
    expected_ns = sorted(f"ate-{NODE}-default-{i}" for i in range(WORKERS))
    assert namespaces() == expected_ns, f"network namespaces {namespaces()} != {expected_ns}"

    not_completed = stack.sql(
        "SELECT s.owner, s.generation, s.state FROM snapshots s WHERE s.state <> 'COMPLETED' AND ("
        " s.id IN (SELECT latest_snapshot_id FROM actors WHERE latest_snapshot_id IS NOT NULL)"
        " OR s.id IN (SELECT golden_snapshot_id FROM actor_templates WHERE golden_snapshot_id IS NOT NULL))"
    )
    assert not not_completed, f"a snapshot that is not COMPLETED is someone's latest: {not_completed}"


def check_snapshots(stack: Stack, owner: str, latest_id: int | None) -> None:
    """Latest COMPLETED with its data intact; COMPLETED generations 1..n with the latest the last."""
    rows = stack.sql(
        "SELECT id, generation, state, uri, manifest FROM snapshots WHERE owner = $1 ORDER BY generation", owner
    )
    completed = [r["generation"] for r in rows if r["state"] == "COMPLETED"]
    assert completed == list(range(1, len(completed) + 1)), (
        f"{owner}: COMPLETED generations {completed} have a gap ({rows})"
    )
    if latest_id is None:
        return
    latest = next((r for r in rows if r["id"] == latest_id), None)
    assert latest is not None and latest["state"] == "COMPLETED", f"{owner}: latest snapshot {latest}"
    assert latest["generation"] == completed[-1], (
        f"{owner}: latest is generation {latest['generation']}, not {completed[-1]}"
    )
    verify_snapshot_dir(snapshot_dir(stack, latest["uri"]), latest["manifest"])


def check_actor(
    stack: Stack, name: str, expected: tuple[int, int], states: tuple[str, ...] = ("RUNNING", "SUSPENDED")
) -> None:
    """The settled actor is in one of `states`, consistent and, running (or resumed), answers `expected`."""
    check_global(stack)
    row = actor_row(stack, name)
    assert row["state"] in states, row
    api = stack.rest("GET", actor_path(name)).json()
    assert api["state"] == row["state"], f"API says {api['state']}, Postgres {row['state']}"
    check_snapshots(stack, f"actor/{ATESPACE}/{name}", row["latest_snapshot_id"])
    if row["state"] == "SUSPENDED":
        assert all(w.actor.name != name for w in stack.health().workers), "a SUSPENDED actor runs on a worker"
        resumed = stack.rest("POST", f"{actor_path(name)}/resume", timeout=90, json={"timeout_seconds": 60})
        assert resumed.status_code == 200, f"resume after the case: {resumed.status_code} {resumed.text}"
        check_global(stack)
    api = stack.rest("GET", actor_path(name)).json()
    status = [w for w in stack.health().workers if w.actor.name == name and w.actor.atespace == ATESPACE]
    assert len(status) == 1 and status[0].sandbox_state == "running", f"atelet Health for {name}: {status}"
    assert api["worker"] and status[0].name == api["worker"]["name"], (
        f"API worker {api['worker']} != atelet {status[0].name}"
    )
    assert count(stack, name) == expected
    suspended = stack.rest("POST", f"{actor_path(name)}/suspend", timeout=90, json={"timeout_seconds": 60})
    assert suspended.status_code == 200 and suspended.json()["state"] == "SUSPENDED", suspended.text
    check_snapshots(stack, f"actor/{ATESPACE}/{name}", actor_row(stack, name)["latest_snapshot_id"])
    check_global(stack)
