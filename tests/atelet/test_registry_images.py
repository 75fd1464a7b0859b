"""Images from a container registry on the node (issue 29, `atelet.registry`): a real registry
(tests/registry.py) holding the example counter, pulled by tag and by digest, unpacked once,
then run in a gVisor sandbox; a missing tag, a registry that is down and a malformed reference
each say what is wrong."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from atelet.errors import AteletError
from atelet.images import ImageStore
from atelet.proto import atelet_pb2 as pb
from atelet.registry import CredentialSource, RegistryPuller
from atelet.registry import _size as registry_size
from domain.image_pulls import PullProgress, PullState
from domain.image_references import RegistryImage, parse_registry_image
from domain.registry_credentials import RegistryCredentials
from tests.atelet.conftest import counter_spec, force_cleanup, make_settings, running_atelet
from tests.atelet.fake_api import fake_api
from tests.registry import LocalRegistry, local_registry


@pytest.fixture(scope="module")
def registry(counter_image: str) -> Iterator[tuple[LocalRegistry, str]]:
    with local_registry() as running:
        yield running, running.push(counter_image, "examples/counter:v1")


def store(tmp_path: Path) -> ImageStore:
    return ImageStore([tmp_path], tmp_path / "images", RegistryPuller(tmp_path / "images" / "registry"))


@pytest.mark.asyncio
async def test_an_image_is_pulled_by_tag_or_digest_once_and_unpacked(
    tmp_path: Path, registry: tuple[LocalRegistry, str]
) -> None:
    running, pushed = registry
    images = store(tmp_path)
    by_tag = await images.unpack(f"{running.address}/examples/counter:v1")
    assert by_tag.digest == pushed  # the digest skopeo wrote when pushing
    assert (by_tag.rootfs / "counter").is_file() and by_tag.config["process"]["args"]
    pulled = list((tmp_path / "images" / "registry").iterdir())
    assert [p.name for p in pulled] == [pushed.replace(":", "_")]
    by_digest = await images.unpack(f"{running.address}/examples/counter:v1@{pushed}")
    assert by_digest == by_tag and list((tmp_path / "images" / "registry").iterdir()) == pulled


@pytest.mark.asyncio
async def test_a_pinned_image_in_the_cache_needs_no_registry(tmp_path: Path, counter_image: str) -> None:
    with local_registry() as running:
        digest = running.push(counter_image, "examples/counter:v2")
        images = store(tmp_path)
        await images.unpack(f"{running.address}/examples/counter@{digest}")
        address = running.address
    again = await images.unpack(f"{address}/examples/counter:v2@{digest}")  # the registry is gone
    assert again.digest == digest


@pytest.mark.asyncio
async def test_what_goes_wrong_is_said(tmp_path: Path, registry: tuple[LocalRegistry, str]) -> None:
    running, _ = registry
    images = store(tmp_path)
    cases = [
        (f"{running.address}/examples/counter:nope", grpc.StatusCode.NOT_FOUND, "no such image"),
        ("127.0.0.1:1/examples/counter:v1", grpc.StatusCode.UNAVAILABLE, "registry unreachable"),
        (f"{running.address}/Examples/counter:v1", grpc.StatusCode.INVALID_ARGUMENT, "path component 'Examples'"),
    ]
    for ref, code, words in cases:
        with pytest.raises(AteletError) as raised:
            await images.unpack(ref, "spec.containers[0].image")
        assert raised.value.code == code and words in raised.value.reason, (ref, raised.value.reason)
        assert raised.value.reason.startswith("spec.containers[0].image: ")
    assert not (tmp_path / "images" / "registry").exists() or not [
        p for p in (tmp_path / "images" / "registry").iterdir() if not p.name.startswith("sha256_")]  # fmt: skip


@pytest.mark.asyncio
async def test_an_image_behind_basic_auth_is_pulled_with_the_credentials_the_api_gives(
    tmp_path: Path, counter_image: str
) -> None:
    """A registry with TLS and basic auth: the credentials are tried in turn until one is let in
    (a refused one first), never kept on disk; without any the pull is refused as unauthorized
    and says how to add a pull secret; with only refused ones it names them and the problems of
    those the API could not give."""
    with local_registry({"puller": "the-password"}) as running:
        digest = running.push(counter_image, "team/counter:v1")
        wrong = RegistryCredentials(running.address, "puller", "not-it", "demo/wrong")
        right = RegistryCredentials(running.address, "puller", "the-password", "demo/right")
        asked: list[str] = []

        def source(*given: RegistryCredentials, problems: tuple[str, ...] = ()) -> CredentialSource:
            async def credentials(image: RegistryImage) -> tuple[list[RegistryCredentials], list[str]]:
                asked.append(str(image))
                return list(given), list(problems)
            return credentials

        reference = f"{running.address}/team/counter:v1@{digest}"
        refusals = [
            (source(), "create a pull secret for it"),
            (source(wrong, problems=("demo/gone: secret gone no longer exists",)),
             "refused the credentials of pull secret demo/wrong (user puller)"),
        ]  # fmt: skip
        for number, (credentials, words) in enumerate(refusals):
            images = store(tmp_path / f"refused-{number}")
            images.registry.credentials = credentials
            with pytest.raises(AteletError) as raised:
                await images.unpack(reference, "spec.containers[0].image")
            assert raised.value.code == grpc.StatusCode.FAILED_PRECONDITION, raised.value.reason
            assert "unauthorized" in raised.value.reason and words in raised.value.reason, raised.value.reason
            assert "the-password" not in raised.value.reason and "not-it" not in raised.value.reason
        assert "demo/gone: secret gone no longer exists" in raised.value.reason
        images = store(tmp_path / "pulled")
        images.registry.credentials = source(wrong, right)
        by_tag = await images.unpack(f"{running.address}/team/counter:v1")
        assert by_tag.digest == digest and (by_tag.rootfs / "counter").is_file()
        # the tag's look-up, the manifest's (its layers), the pull
        assert asked[-3:] == [f"{running.address}/team/counter:v1", reference, reference]
        auth_dir = tmp_path / "pulled" / "images" / "registry" / ".auth"
        assert auth_dir.stat().st_mode & 0o777 == 0o700 and not list(auth_dir.iterdir())


@pytest.mark.asyncio
async def test_a_layer_two_images_share_is_downloaded_once_and_kept_once(
    tmp_path: Path, registry: tuple[LocalRegistry, str], counter_image: str
) -> None:
    """A second image built on the counter (umoci insert: one layer more) shares the counter's
    layer; pulled after it, that layer is the same file (one inode, two links) in both cached
    layouts, not a second download (containers/image writes a downloaded blob as a new file), and
    the cache's size counts it once."""
    running, pushed = registry
    layout = tmp_path / "derived"
    subprocess.run(["skopeo", "copy", "--quiet", counter_image, f"oci:{layout}:base"], check=True, capture_output=True)
    (tmp_path / "extra.txt").write_text("one more layer\n")
    subprocess.run(["umoci", "insert", "--image", f"{layout}:base", "--tag", "derived", str(tmp_path / "extra.txt"),
                    "/extra.txt"], check=True, capture_output=True)  # fmt: skip
    derived = running.push(f"oci:{layout}:derived", "examples/derived:v1")
    images = store(tmp_path / "node")
    await images.unpack(f"{running.address}/examples/counter@{pushed}")
    await images.unpack(f"{running.address}/examples/derived@{derived}")
    cache = tmp_path / "node" / "images" / "registry"
    blobs = {name: {p.name: p.stat() for p in (cache / name.replace(":", "_") / "blobs" / "sha256").iterdir()}
             for name in (pushed, derived)}  # fmt: skip
    raw = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false", "--no-creds",
                          f"docker://{running.address}/examples/counter@{pushed}"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    [base_layer] = [layer["digest"].split(":")[1] for layer in json.loads(raw)["layers"]]
    first, second = blobs[pushed][base_layer], blobs[derived][base_layer]
    assert (first.st_ino, first.st_nlink) == (second.st_ino, 2), (first, second)
    every = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
    assert registry_size(cache) == every - first.st_size  # the shared layer's file counted once


@pytest.mark.asyncio
async def test_a_pull_tells_its_progress_against_the_manifests_layer_sizes(
    tmp_path: Path, registry: tuple[LocalRegistry, str]
) -> None:
    """Each look at a pull says the layers and their sizes as the registry's manifest states them
    (read here with skopeo), bytes so far never more than that nor going back; the last says
    Pulled with all of them. A pull that fails says Failed, with why."""
    running, pushed = registry
    raw = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false", "--no-creds",
                          f"docker://{running.address}/examples/counter@{pushed}"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    sizes = [layer["size"] for layer in json.loads(raw)["layers"]]
    looks: list[tuple[str, PullProgress]] = []

    async def told(image: RegistryImage, progress: PullProgress) -> None:
        looks.append((str(image), progress))

    images = store(tmp_path)
    images.registry.progress = told
    await images.unpack(f"{running.address}/examples/counter:v1")
    assert looks and {image for image, _ in looks} == {f"{running.address}/examples/counter:v1@{pushed}"}
    assert all((p.layers, p.bytes_total) == (len(sizes), sum(sizes)) for _, p in looks), looks
    done = [p.bytes_done for _, p in looks]
    assert done == sorted(done) and max(done) == sum(sizes)
    assert [p.state for _, p in looks][-1] is PullState.PULLED and looks[-1][1].text().startswith("pulled ")
    assert all(p.state is PullState.PULLING for _, p in looks[:-1])

    looks.clear()
    with pytest.raises(AteletError):
        await images.unpack(f"{running.address}/examples/counter@sha256:{'0' * 64}")
    assert [p.state for _, p in looks][-1] is PullState.FAILED and "no such image" in looks[-1][1].message, looks


@pytest.mark.runsc
@pytest.mark.asyncio
async def test_a_sandbox_runs_the_image_from_the_registry(short_tmp: Path, registry: tuple[LocalRegistry, str]) -> None:
    running, pushed = registry
    settings = make_settings(short_tmp)
    try:
        async with running_atelet(settings) as atelet:
            spec = counter_spec(f"{running.address}/examples/counter:v1@{pushed}")
            run = await atelet.stub.Run(pb.RunRequest(operation_id="op-registry", worker="default-0",
                                                      actor=pb.ActorRef(atespace="demo", name="pulled"), spec=spec,
                                                      probe_timeout_seconds=30))  # fmt: skip
            async with httpx.AsyncClient(timeout=10) as client:
                answer = await client.get(f"http://{run.worker_ip}:8080/")
            assert answer.json()["memory_count"] == 1
            await atelet.stub.Terminate(pb.TerminateRequest(operation_id="op-registry-t", worker="default-0",
                                                            actor=pb.ActorRef(atespace="demo", name="pulled")))  # fmt: skip
    finally:
        force_cleanup(settings)


@pytest.mark.asyncio
async def test_the_cache_keeps_its_bound_by_dropping_the_least_recently_used(tmp_path: Path, counter_image: str) -> None:
    with local_registry() as running:
        # two images that share no layer: the counter, and one of 4 MiB of random bytes (umoci)
        first = running.push(counter_image, "examples/counter:v1")
        other = tmp_path / "other"
        subprocess.run(["umoci", "init", "--layout", str(other)], check=True, capture_output=True)
        subprocess.run(["umoci", "new", "--image", f"{other}:v1"], check=True, capture_output=True)
        (tmp_path / "noise").write_bytes(os.urandom(4 << 20))
        subprocess.run(["umoci", "insert", "--image", f"{other}:v1", str(tmp_path / "noise"), "/noise"],
                       check=True, capture_output=True)  # fmt: skip
        running.push(f"oci:{other}:v1", "examples/noise:v1")
        puller = RegistryPuller(tmp_path / "registry")
        one, _ = await puller.layout_of(parse_registry_image(f"{running.address}/examples/counter:v1"))
        size = sum(f.stat().st_size for f in one.rglob("*") if f.is_file())
        puller.max_bytes = size + size // 2  # room for either, not both
        two, _ = await puller.layout_of(parse_registry_image(f"{running.address}/examples/noise:v1"))
        assert two != one and not one.exists() and two.exists()  # the older went
        assert one.name == first.replace(":", "_")
        again, _ = await puller.layout_of(parse_registry_image(f"{running.address}/examples/counter@{first}"))
        assert again == one and again.exists() and not two.exists()  # pulled back; now the other is the older


@pytest.mark.runsc
@pytest.mark.asyncio
async def test_the_node_pulls_its_templates_images_before_any_resume(
    short_tmp: Path, registry: tuple[LocalRegistry, str]
) -> None:
    running, pushed = registry
    pinned = f"{running.address}/examples/counter:v1@{pushed}"
    with fake_api() as api:
        api.images = [pinned, "oci:examples/counter/oci:latest"]  # a local layout is not pre-pulled
        settings = make_settings(short_tmp, api_server=api.url, image_prefetch_seconds=0.5)
        try:
            async with running_atelet(settings):
                unpacked = Path(settings.state_dir).resolve() / "images" / pushed.replace(":", "_")
                deadline = time.monotonic() + 20
                while not (unpacked / "config.json").is_file() and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                assert (unpacked / "rootfs" / "counter").is_file()  # pulled and unpacked, no Run asked
                assert api.of("GET", f"/v1/nodes/{settings.node}/images")
        finally:
            force_cleanup(settings)
