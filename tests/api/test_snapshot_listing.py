"""`ate get snapshots` through the real api-server (issue 30, first part): each snapshot of an
atespace's actors and templates, not yet collected, with its generation, scope, where it is, its
size at rest (the sum of its files as its manifest records them) and what keeps it; one snapshot
with its files; bad input says what is wrong. The rows are made with the store's own steps
(golden snapshot, resume, suspend, tag), the values checked are those this test gave them."""

from __future__ import annotations

import httpx

from domain.refs import ActorRef
from store import Store
from tests.api.test_logs import running_actor

FILES = [{"path": "checkpoint/memory.img", "sha256": "a" * 64, "size_bytes": "1000"},
         {"path": "volumes/data.tar", "sha256": "b" * 64, "size_bytes": "24"}]  # fmt: skip


async def test_an_atespaces_snapshots_show_size_place_and_what_keeps_them(api: httpx.AsyncClient,
                                                                          api_store: Store) -> None:  # fmt: skip
    ref, _ = await running_actor(api, api_store, "snaps", "snapnode")
    plan = await api_store.suspends.begin(ref, "op-suspend-1")
    assert plan.snapshot is not None
    # the size recorded at completion (5) is not what the files take: the listing sums the manifest
    await api_store.suspends.complete(ref, "op-suspend-1", plan.snapshot.snapshot_id,
                                      {"sandbox_class": "gvisor", "files": FILES}, 5)  # fmt: skip
    await api_store.tags.create(ref, "good")
    listed = await api.get("/v1/atespaces/snaps/snapshots")
    assert listed.status_code == 200, listed.text
    shown = {(s["owner_kind"], s["owner"], s["generation"]): s for s in listed.json()["items"]}
    actor = shown[("actor", "a1", 1)]
    assert (actor["scope"], actor["state"], actor["storage"], actor["size_bytes"], actor["kept_by"]) == (
        "FULL", "COMPLETED", "EXTERNAL", 1024, ["latest", "tag good"]), actor  # fmt: skip
    assert actor["location"].startswith("file:///snap/"), actor
    [golden] = [s for key, s in shown.items() if key[0] == "template"]
    assert (golden["owner"], golden["kept_by"]) == ("t", ["golden"]), golden
    assert "files" not in actor or actor["files"] is None

    only = (await api.get("/v1/atespaces/snaps/snapshots", params={"actor": "a1"})).json()["items"]
    assert [(s["owner"], s["generation"]) for s in only] == [("a1", 1)]
    one = await api.get(f"/v1/atespaces/snaps/snapshots/{actor['id']}")
    assert one.status_code == 200 and one.json()["files"] == [
        {"path": "checkpoint/memory.img", "size_bytes": 1000}, {"path": "volumes/data.tar", "size_bytes": 24}]

    # another atespace's snapshot is not this one's; bad IDs and names say what is wrong
    await api_store.atespaces.create("other-snaps")
    elsewhere = await api.get(f"/v1/atespaces/other-snaps/snapshots/{actor['id']}")
    assert elsewhere.status_code == 404 and "not found in atespace other-snaps" in elsewhere.text, elsewhere.text
    assert (await api.get("/v1/atespaces/other-snaps/snapshots")).json() == {"items": []}
    for path, status, words in (("/v1/atespaces/snaps/snapshots/0", 400, "snapshot_id"),
                                ("/v1/atespaces/snaps/snapshots/nine", 400, "snapshot_id"),
                                ("/v1/atespaces/nope/snapshots", 404, "nope")):  # fmt: skip
        bad = await api.get(path)
        assert bad.status_code == status and words in bad.text, (path, bad.text)
    bad_actor = await api.get("/v1/atespaces/snaps/snapshots", params={"actor": "Not_A_Name"})
    assert bad_actor.status_code == 400 and "actor" in bad_actor.text, bad_actor.text
    assert ActorRef("snaps", "a1").key == "snaps/a1"


async def test_a_revert_to_a_generation_that_is_not_kept_is_refused_before_anything_starts(
    api: httpx.AsyncClient, api_store: Store
) -> None:
    # no Temporal worker runs here: an answer other than 400 would mean a workflow was started
    ref, _ = await running_actor(api, api_store, "gens-api", "gensnode")
    plan = await api_store.suspends.begin(ref, "op-suspend-1")
    assert plan.snapshot is not None
    await api_store.suspends.complete(ref, "op-suspend-1", plan.snapshot.snapshot_id, {"files": FILES}, 5)
    before = (await api.get("/v1/atespaces/gens-api/actors/a1")).json()
    path = "/v1/atespaces/gens-api/actors/a1/revert"
    for body, words in (
        ({"to_generation": 4}, "to_generation: actor gens-api/a1 has no kept completed generation 4; kept: 1."),
        ({"to_generation": 0}, "to_generation"),
        ({"to_generation": "1"}, "to_generation"),
        ({"to_generation": 1.5}, "to_generation"),
    ):
        refused = await api.post(path, json=body)
        assert refused.status_code == 400 and words in refused.json()["message"], (body, refused.text)
    assert (await api.post(path, json={"to_generation": 4})).json()["details"]["kept_generations"] == [1]
    after = (await api.get("/v1/atespaces/gens-api/actors/a1")).json()
    assert (after["state"], after["version"]) == (before["state"], before["version"]) == ("SUSPENDED", before["version"])
    # without a generation, a SUSPENDED actor is refused, and told how to go further back
    plain = await api.post(path, json={})
    assert plain.status_code == 409 and "--to-generation G" in plain.json()["message"], plain.text


async def test_a_template_retention_outside_1_to_100_is_refused(api: httpx.AsyncClient) -> None:
    await api.post("/v1/atespaces", json={"name": "retain-api"})
    for value in (0, 101, "3", None):
        spec = {"containers": [{"name": "c", "image": "oci:x:latest", "port": 80}],
                "snapshotConfig": {"retainGenerations": value}}  # fmt: skip
        refused = await api.post("/v1/atespaces/retain-api/templates", json={"name": "t", "spec": spec})
        assert refused.status_code == 400, (value, refused.text)
        assert "snapshotConfig.retainGenerations" in refused.json()["message"], refused.text
    assert (await api.get("/v1/atespaces/retain-api/templates")).json()["items"] == []


async def test_forks_through_the_api_and_what_is_refused(api: httpx.AsyncClient, api_store: Store) -> None:
    ref, _ = await running_actor(api, api_store, "forks-api", "forksnode")
    plan = await api_store.suspends.begin(ref, "op-suspend-1")
    assert plan.snapshot is not None
    await api_store.suspends.complete(ref, "op-suspend-1", plan.snapshot.snapshot_id, {"files": FILES}, 5)
    path = "/v1/atespaces/forks-api/actors/a1/forks"
    made = await api.post(path, json={"name": "f", "count": 3})
    assert made.status_code == 201, made.text
    assert [(a["name"], a["state"], a["latest_snapshot"]["generation"]) for a in made.json()["items"]] == [
        ("f-1", "SUSPENDED", 1), ("f-2", "SUSPENDED", 1), ("f-3", "SUSPENDED", 1)]  # fmt: skip
    one = await api.post(path, json={"name": "solo", "generation": 1})
    assert one.status_code == 201 and [a["name"] for a in one.json()["items"]] == ["solo"], one.text
    for body, status, words in (
        ({"name": "g", "count": 0}, 400, "count"),
        ({"name": "g", "count": 101}, 400, "count"),
        ({"name": "g", "count": "2"}, 400, "count"),
        ({"name": "g", "generation": 0}, 400, "generation"),
        ({"name": "g", "generation": 2}, 400, "generation: actor forks-api/a1 has no kept completed generation 2; kept: 1."),
        ({"name": "x" * 62, "count": 10}, 400, "makes names longer than 63 characters"),
        ({"name": "Bad_Name"}, 400, "name"),
        ({"name": "f", "count": 4}, 409, "actor forks-api/f-1 already exists; no actor was forked"),
    ):
        refused = await api.post(path, json=body)
        assert refused.status_code == status and words in refused.json()["message"], (body, refused.text)
    missing = await api.post("/v1/atespaces/forks-api/actors/nobody/forks", json={"name": "g"})
    assert missing.status_code == 404 and "nobody" in missing.text, missing.text
    names = sorted(a["name"] for a in (await api.get("/v1/atespaces/forks-api/actors")).json()["items"])
    assert names == ["a1", "f-1", "f-2", "f-3", "solo"]  # none of the refused forks made an actor
