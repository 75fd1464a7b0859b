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
