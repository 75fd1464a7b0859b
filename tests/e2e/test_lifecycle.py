"""Revert, forced delete, tags and the way out of a stuck resume, on the real stack.

Counts come from the counter's definition (+1 memory and +1 file per request; FULL snapshots
keep both): a revert returns the actor to its last COMPLETED snapshot, so the requests made
after that snapshot are forgotten.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from tests.e2e.conftest import PORTS, REPO, Stack
from tests.e2e.test_tour import get

pytestmark = [pytest.mark.slow, pytest.mark.runsc]


def api(stack: Stack, method: str, path: str, **kwargs: object) -> httpx.Response:
    return httpx.request(method, stack.api + path, timeout=90, headers=stack.headers, **kwargs)  # type: ignore[arg-type]


def setup_actor(stack: Stack, atespace: str, name: str) -> str:
    stack.ate("create", "atespace", atespace, check=False)
    stack.ate("create", "template", "counter", "-a", atespace, "-f", "examples/counter/template.yaml", check=False)
    stack.ate("create", "actor", name, "-a", atespace, "--template", "counter")
    return f"/v1/atespaces/{atespace}/actors/{name}"


def test_revert_returns_to_the_last_completed_snapshot(stack: Stack) -> None:
    path = setup_actor(stack, "rev", "r1")
    assert get(stack, "rev/r1")["memory_count"] == 1
    stack.ate("suspend", "actor", "r1", "-a", "rev")  # generation 1 holds count 1
    assert get(stack, "rev/r1")["memory_count"] == 2
    assert get(stack, "rev/r1")["memory_count"] == 3
    reverted = api(stack, "POST", path + "/revert", json={})
    assert reverted.status_code == 200, reverted.text
    assert (reverted.json()["state"], reverted.json()["worker"]) == ("SUSPENDED", None)
    after = get(stack, "rev/r1")
    assert (after["memory_count"], after["file_count"]) == (2, 2)  # back to generation 1, then +1
    refused = api(stack, "POST", path + "/suspend", json={})
    assert refused.status_code == 200
    again = api(stack, "POST", path + "/revert", json={})
    assert again.status_code == 409
    assert again.json()["message"].startswith("actor rev/r1 is not in a revertable state (state: SUSPENDED)")
    history = api(stack, "GET", path + "/operations").json()["items"]
    # newest first: the suspend just now, the resume by get() after the revert, the revert
    assert [h["operation"] for h in history[:3]] == ["SuspendActor", "ResumeActor", "RevertActor"]
    assert all(h["outcome"] == "ok" and h["duration_seconds"] is not None for h in history[:3])


def test_revert_to_a_kept_generation_and_past_a_damaged_latest(stack: Stack) -> None:
    path = setup_actor(stack, "gens", "g1")
    for count in (1, 2, 3):  # generation N holds count N (memory and file)
        assert get(stack, "gens/g1")["memory_count"] == count
        stack.ate("suspend", "actor", "g1", "-a", "gens")
    listed = json.loads(stack.ate("get", "snapshots", "-a", "gens", "--actor", "g1", "-o", "json").stdout)["items"]
    kept = {s["generation"]: s["kept_by"] for s in listed}
    # the counter's template keeps the default 2 generations; generation 1 is the collector's
    assert (kept[3], kept[2], kept.get(1, [])) == (["latest"], ["retained"], []), kept

    # a damaged latest snapshot: the refusal says which earlier generation a revert can go back to
    (snapshot,) = (stack.data_dir / "snapshots/gens/actors/g1").glob("3-*")
    largest = max((f for f in (snapshot / "checkpoint").rglob("*") if f.is_file()), key=lambda f: f.stat().st_size)
    with largest.open("r+b") as f:
        original = f.read(1)
        f.seek(0)
        f.write(bytes([original[0] ^ 0xFF]))
    refused = httpx.get(stack.router + "/", headers={"ate-target-actor": "gens/g1"}, timeout=120)
    assert refused.status_code == 503, refused.text
    assert "sha256" in refused.text and "`ate revert actor g1 -a gens --to-generation 2`" in refused.text, refused.text
    assert api(stack, "GET", path).json()["state"] == "SUSPENDED"

    bad = stack.ate("revert", "actor", "g1", "-a", "gens", "--to-generation", "9", check=False)
    assert bad.returncode != 0 and "to_generation: actor gens/g1 has no kept completed generation 9" in bad.stderr
    assert api(stack, "GET", path).json()["latest_snapshot"]["generation"] == 3  # nothing changed
    back = stack.ate("revert", "actor", "g1", "-a", "gens", "--to-generation", "2").stdout
    assert back.strip() == "actor/g1 reverted: SUSPENDED (back to generation 2)", back
    after = get(stack, "gens/g1")
    assert (after["memory_count"], after["file_count"]) == (3, 3)  # generation 2's counts, then +1
    stack.ate("suspend", "actor", "g1", "-a", "gens")  # generation 4
    assert api(stack, "GET", path).json()["latest_snapshot"]["generation"] == 4

    # forks of generation 4 (count 2): no files of their own until their first suspend
    made = stack.ate("create", "actor", "gf", "-a", "gens", "--from-actor", "g1@4", "--count", "2").stdout
    assert made.splitlines() == [f"actor/gf-{n} created (from g1 generation 4)" for n in (1, 2)], made
    assert not list((stack.data_dir / "snapshots/gens/actors").glob("gf-*"))
    for name in ("gf-1", "gf-2"):
        counts = get(stack, f"gens/{name}")
        assert (counts["memory_count"], counts["file_count"]) == (4, 4)  # generation 4's 3, then +1
        stack.ate("suspend", "actor", name, "-a", "gens")
    assert get(stack, "gens/gf-1")["memory_count"] == 5  # its own generation 1 now
    stack.ate("suspend", "actor", "gf-1", "-a", "gens")
    own = sorted(p.name.split("-")[0] for p in (stack.data_dir / "snapshots/gens/actors/gf-1").iterdir())
    assert own == ["1", "2"], own


def hooked_template(stack: Stack, tmp_path: Path, atespace: str, name: str, port: int) -> None:
    """The counter's template with `lifecycle.postRestore.httpPost` to its /restored on `port`."""
    text = (REPO / "examples/counter/template.yaml").read_text()
    hooked = text.replace(
        "    volumeMounts: [{name: data, mountPath: /data}]\n",
        "    volumeMounts: [{name: data, mountPath: /data}]\n"
        f"    lifecycle: {{postRestore: {{httpPost: {{path: /restored, port: {port}}}}}}}\n",
    )
    assert hooked != text
    (tmp_path / f"{name}.yaml").write_text(hooked)
    stack.ate("create", "atespace", atespace, check=False)
    stack.ate("create", "template", name, "-a", atespace, "-f", str(tmp_path / f"{name}.yaml"))


def router_get(stack: Stack, target: str, path: str) -> httpx.Response:
    return httpx.get(stack.router + path, headers={"ate-target-actor": target}, timeout=120)


def test_a_restored_or_forked_actor_is_told_before_traffic_and_draws_fresh_randomness(
    stack: Stack, tmp_path: Path
) -> None:
    hooked_template(stack, tmp_path, "hooks", "counter-hook", 8080)
    stack.ate("create", "actor", "h1", "-a", "hooks", "--template", "counter-hook")
    # the first resume restores the template's golden snapshot: a copy, told so before any request
    [first] = router_get(stack, "hooks/h1", "/restored").json()["notices"]
    assert {k: first[k] for k in ("actor", "source", "generation", "forked")} == {
        "actor": "hooks/h1", "source": "template/hooks/counter-hook", "generation": 1, "forked": True}, first  # fmt: skip
    stack.ate("suspend", "actor", "h1", "-a", "hooks")
    time.sleep(1.0)
    # its own snapshot: not a fork, suspended about a second (the notices live in its memory)
    own = router_get(stack, "hooks/h1", "/restored").json()["notices"]
    assert own[0] == first and len(own) == 2, own
    assert {k: own[1][k] for k in ("actor", "source", "generation", "forked")} == {
        "actor": "hooks/h1", "source": "actor/hooks/h1", "generation": 1, "forked": False}, own  # fmt: skip
    assert 1.0 <= own[1]["suspended_seconds"] < 60, own[1]
    stack.ate("suspend", "actor", "h1", "-a", "hooks")  # generation 2

    stack.ate("create", "actor", "hf", "-a", "hooks", "--from-actor", "h1", "--count", "2")
    drawn = []
    for name in ("hf-1", "hf-2"):
        told = router_get(stack, f"hooks/{name}", "/restored").json()["notices"][-1]
        assert {k: told[k] for k in ("actor", "source", "generation", "forked")} == {
            "actor": f"hooks/{name}", "source": "actor/hooks/h1", "generation": 2, "forked": True}, told  # fmt: skip
        drawn.append(router_get(stack, f"hooks/{name}", "/random").json()["random"])
        stack.ate("suspend", "actor", name, "-a", "hooks")
    assert drawn[0] != drawn[1], drawn  # two copies of one memory do not draw the same bytes

    # a hook that cannot be reached: the restore fails and the actor is not let in
    hooked_template(stack, tmp_path, "hooks", "counter-deaf", 9)
    stack.ate("create", "actor", "d1", "-a", "hooks", "--template", "counter-deaf")
    refused = router_get(stack, "hooks/d1", "/")
    assert refused.status_code == 503, refused.text
    assert "postRestore hook POST :9/restored of container counter gave no answer" in refused.text, refused.text
    # the resume retries the refusal in the background for a while; a forced delete ends it
    stack.ate("delete", "actor", "d1", "-a", "hooks", "--force")


def test_revert_takes_over_a_stuck_resume(stack: Stack) -> None:
    path = setup_actor(stack, "stuck", "s1")
    armed = stack.failpoints / "ResumeActor.atelet_call"
    reached = stack.failpoints / "ResumeActor.atelet_call.reached"
    armed.touch()
    outcome: dict[str, httpx.Response] = {}
    try:
        resume = threading.Thread(
            target=lambda: outcome.update(r=api(stack, "POST", path + "/resume", json={"timeout_seconds": 60}))
        )
        resume.start()
        deadline = time.monotonic() + 30
        while not reached.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reached.exists(), "the resume never reached the atelet call"
        assert api(stack, "GET", path).json()["state"] == "RESUMING"
        busy = api(stack, "POST", path + "/suspend", json={})
        assert busy.status_code == 409  # another kind of operation still gets the lock error
        reverted = api(stack, "POST", path + "/revert", json={})
        assert reverted.status_code == 200, reverted.text
        assert reverted.json()["state"] == "SUSPENDED"
    finally:
        armed.unlink(missing_ok=True)
        reached.unlink(missing_ok=True)
    resume.join(90)
    assert outcome["r"].status_code >= 400  # the resume it replaced did not pretend to succeed
    workers = api(stack, "GET", "/v1/workers").json()["items"]
    assert all("stuck/s1" not in w["actors"] for w in workers)  # no place leaked
    assert get(stack, "stuck/s1")["memory_count"] == 1  # and it still resumes from its golden snapshot
    stack.ate("suspend", "actor", "s1", "-a", "stuck")


def test_forced_delete_of_a_running_actor(stack: Stack) -> None:
    path = setup_actor(stack, "force", "f1")
    get(stack, "force/f1")
    refused = api(stack, "DELETE", path)
    assert refused.status_code == 409 and "state: RUNNING" in refused.json()["message"]
    deleted = api(stack, "DELETE", path, params={"force": "true"})
    assert deleted.status_code == 204, deleted.text
    assert api(stack, "GET", path).status_code == 404
    workers = api(stack, "GET", "/v1/workers").json()["items"]
    assert all(w["actors"] == [] or "force/f1" not in w["actors"] for w in workers)


def test_tag_and_create_from_tag(stack: Stack) -> None:
    path = setup_actor(stack, "tags", "t1")
    get(stack, "tags/t1")
    get(stack, "tags/t1")  # count 2
    early = api(stack, "POST", path + "/tags", json={"tag": "v1"})
    assert early.status_code == 409 and "suspend it first" in early.json()["message"]
    stack.ate("suspend", "actor", "t1", "-a", "tags")
    tagged = api(stack, "POST", path + "/tags", json={"tag": "v1"})
    assert tagged.status_code == 201, tagged.text
    assert (tagged.json()["generation"], tagged.json()["source_actor"]) == (1, "t1")
    created = api(stack, "POST", "/v1/atespaces/tags/actors", json={"name": "t2", "from_tag": "tags/v1"})
    assert created.status_code == 201, created.text
    clone = get(stack, "tags/t2")
    assert (clone["memory_count"], clone["file_count"]) == (3, 3)  # the tagged state, then +1
    stack.ate("suspend", "actor", "t2", "-a", "tags")

    # `ate get snapshots`: t1's generation 1, kept by its being the latest and by the tag, its
    # size the bytes its files take in the snapshot store (summed here from the directory)
    [snapshot] = json.loads(stack.ate("get", "snapshots", "-a", "tags", "--actor", "t1", "-o", "json").stdout)["items"]
    assert (snapshot["generation"], snapshot["scope"], snapshot["state"], snapshot["kept_by"]) == (
        1, "FULL", "COMPLETED", ["latest", "tag v1"]), snapshot  # fmt: skip
    directory = Path(snapshot["location"].removeprefix("file://"))
    on_disk = sum(f.stat().st_size for f in directory.rglob("*") if f.is_file() and f.name != "manifest.json")
    assert snapshot["size_bytes"] == on_disk > 0, (snapshot, on_disk)
    table = stack.ate("get", "snapshots", "-a", "tags").stdout.splitlines()
    assert table[0].split() == ["ID", "OWNER", "GEN", "SCOPE", "STATE", "SIZE", "WHERE", "KEPT-BY", "AGE"]
    kept = {line.split()[1]: line.split()[7] for line in table[1:]}
    assert kept["actor/t1"] == "latest,tag:v1" and kept["actor/t2"] == "latest" and kept["template/counter"] == "golden"
    described = stack.ate("describe", "snapshot", str(snapshot["id"]), "-a", "tags").stdout
    assert "Kept by:          latest, tag v1" in described and "Files:" in described, described


def test_cli_lifecycle_commands(stack: Stack) -> None:
    setup_actor(stack, "cli", "k1")
    get(stack, "cli/k1")
    stack.ate("suspend", "actor", "k1", "-a", "cli")
    tagged = stack.ate("tag", "actor", "k1", "v1", "-a", "cli")
    assert tagged.stdout.strip() == "tag/cli/v1 created: actor k1, generation 1"
    assert "v1" in stack.ate("get", "tags", "-a", "cli").stdout
    stack.ate("create", "actor", "k2", "-a", "cli", "--from-tag", "cli/v1")
    assert get(stack, "cli/k2")["memory_count"] == 2  # the tagged count 1, then +1

    armed = stack.failpoints / "ResumeActor.atelet_call"
    armed.touch()
    try:
        resume = threading.Thread(target=lambda: stack.ate("resume", "actor", "k1", "-a", "cli", check=False))
        resume.start()
        deadline = time.monotonic() + 30
        while not (stack.failpoints / "ResumeActor.atelet_call.reached").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        in_flight = stack.ate("get", "operations", "-a", "cli", "--actor", "k1").stdout
        # the workflow's own step: placement and restore run as one regular activity, so the
        # workflow answers while it waits; the actor is RESUMING on its worker meanwhile
        assert "ResumeActor" in in_flight and "placement and restore" in in_flight, in_flight
        assert "RESUMING" in stack.ate("get", "actor", "k1", "-a", "cli").stdout
    finally:
        armed.unlink(missing_ok=True)
        (stack.failpoints / "ResumeActor.atelet_call.reached").unlink(missing_ok=True)
    resume.join(60)
    described = stack.ate("describe", "actor", "k1", "-a", "cli").stdout
    assert "State:            RUNNING" in described
    assert "Operations (newest first):" in described
    history_lines = [
        line.split() for line in described.splitlines() if line.startswith(("ResumeActor", "SuspendActor"))
    ]
    assert [row[:2] for row in history_lines] == [["ResumeActor", "ok"], ["SuspendActor", "ok"], ["ResumeActor", "ok"]]

    reverted = stack.ate("revert", "actor", "k1", "-a", "cli")
    assert reverted.stdout.strip() == "actor/k1 reverted: SUSPENDED (back to generation 1)"
    stack.ate("delete", "actor", "k2", "-a", "cli", "--force")
    assert stack.ate("get", "actor", "k2", "-a", "cli", check=False).returncode == 1


def test_a_sandbox_that_dies_makes_its_actor_crashed_until_reverted(stack: Stack) -> None:
    path = setup_actor(stack, "crash", "x1")
    assert get(stack, "crash/x1")["memory_count"] == 1
    stack.ate("suspend", "actor", "x1", "-a", "crash")  # generation 1: count 1
    assert get(stack, "crash/x1")["memory_count"] == 2
    worker = api(stack, "GET", path).json()["worker"]["name"]
    root = stack.data_dir / "atelet" / "runsc"
    listed = subprocess.run(
        ["runsc", "--root", str(root), "list", "-format=json"], capture_output=True, text=True, check=True
    )
    # a container of an earlier actor on this worker may still be in the list, stopped, while
    # the atelet deletes it in the background: take the running one
    [container] = [
        c["id"] for c in json.loads(listed.stdout or "[]") if c["id"].startswith(worker) and c["status"] == "running"
    ]
    subprocess.run(["runsc", "--root", str(root), "kill", container, "KILL"], check=True)  # the workload dies

    deadline = time.monotonic() + 10
    while api(stack, "GET", path).json()["state"] != "CRASHED" and time.monotonic() < deadline:
        time.sleep(0.1)
    crashed = api(stack, "GET", path).json()
    assert crashed["state"] == "CRASHED" and crashed["worker"] is None
    assert f"sandbox exited on worker {worker}" in crashed["last_error"]
    refused = httpx.get(stack.router + "/", headers={"ate-target-actor": "crash/x1"}, timeout=30)
    assert refused.status_code == 503 and "CRASHED" in refused.text and "revert" in refused.text, refused.text
    assert all("crash/x1" not in w["actors"] for w in api(stack, "GET", "/v1/workers").json()["items"])

    stack.ate("revert", "actor", "x1", "-a", "crash")
    back = get(stack, "crash/x1")
    assert (back["memory_count"], back["file_count"]) == (2, 2)  # generation 1 (count 1), then this request
    stack.ate("suspend", "actor", "x1", "-a", "crash")


def test_snapshots_of_deleted_actors_are_collected(stack: Stack) -> None:
    path = setup_actor(stack, "gc", "g1")
    get(stack, "gc/g1")
    stack.ate("suspend", "actor", "g1", "-a", "gc")
    get(stack, "gc/g1")
    stack.ate("suspend", "actor", "g1", "-a", "gc")  # generation 2 supersedes generation 1
    actor_dir = stack.data_dir / "snapshots" / "gc" / "actors" / "g1"
    assert len([d for d in actor_dir.iterdir() if d.is_dir()]) == 2
    stack.ate("delete", "actor", "g1", "-a", "gc")
    assert api(stack, "GET", path).status_code == 404

    async def collect() -> None:
        client = await Client.connect(f"127.0.0.1:{PORTS['temporal']}")
        await client.get_workflow_handle("snapshot-gc").signal("collect_now")

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and actor_dir.exists() and any(actor_dir.iterdir()):
        asyncio.run(collect())
        time.sleep(1)
    assert not actor_dir.exists() or not any(actor_dir.iterdir()), list(actor_dir.iterdir())
    golden = stack.data_dir / "snapshots" / "gc" / "templates" / "counter"
    assert golden.exists() and any(golden.iterdir())  # the template's golden snapshot is still in use
