"""Egress through the node's Squid (issue 28), from inside real gVisor sandboxes.

One atelet (real runsc, real Squid) with two counter actors: ``demo/egress`` with a policy
(``api.example.test`` with a credential, ``plain.example.test`` without, ``forged.example.test``
whose server the proxy must not trust, ``node.example.test`` that resolves to the node), and
``demo/bare`` with none. The API is a stand-in answering the egress route (``fake_api``).
Each request is made by the sandbox itself (the counter's ``POST /fetch``), through its proxy
settings or around them (``direct``: dialling the address, as software that ignores them).

Nothing leaves the machine: every upstream is a stand-in (``egress_upstream``) in a network
namespace the test makes, with addresses of its own (10.251.x.0/24), including the metadata
address 169.254.169.254 (a namespace of its own, routed there for the test); Squid resolves
names through the test's hosts file, and its DNS server is 127.0.0.1 (nothing listens). A test
guard refuses every connection of Squid's user to any other address.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from ate.dev.certificates import CertificateAuthority
from atelet.egress import rules
from atelet.egress.proxy import default_run_dir
from atelet.egress.squid import squid_ids
from atelet.proto import atelet_pb2 as pb
from tests.atelet.conftest import Atelet, counter_spec, force_cleanup, make_settings, running_atelet, runsc_missing
from tests.atelet.fake_api import FakeApi, fake_api
from tests.atelet.prober import Listeners

pytestmark = [pytest.mark.runsc, pytest.mark.asyncio]

EGRESS = pb.ActorRef(atespace="demo", name="egress")
BARE = pb.ActorRef(atespace="demo", name="bare")
SECRET = f"sk-test-{uuid.uuid4().hex}"
UPSTREAM = Path(__file__).with_name("egress_upstream.py")
EGRESS_DRAIN_SECONDS = 3.0  # the checkpoint's wait for outbound connections, short for the test
DENIED_WITHIN_MS = 3000  # a loose bound: refused at once, not after a time-out (10 s here)


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=check)


@dataclass
class StandIns:
    """The test's own network: upstream stand-ins, the metadata stand-in, their certificates."""

    directory: Path
    net: str  # 10.251.x
    tag: str
    record: Path
    upstream_ca: Path
    egress_ca: tuple[Path, Path]
    hosts: Path
    processes: list[subprocess.Popen[str]]

    def address(self, last: int) -> str:
        return f"{self.net}.{last}"

    def requests(self) -> list[dict[str, Any]]:
        lines = self.record.read_text().splitlines() if self.record.exists() else []
        return [json.loads(line) for line in lines]


def new_of(uid: int) -> list[str]:
    """The match of the connections user ``uid`` opens (not its answers to the sandboxes)."""
    return ["-m", "owner", "--uid-owner", str(uid), "-m", "conntrack", "--ctstate", "NEW"]


def _serve(netns: str, record: Path, *specs: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, str(UPSTREAM), str(record), *specs],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready", "the stand-in upstream did not start"
    return process


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandIns]:
    reason = runsc_missing()
    if reason:
        pytest.skip(reason)
    directory = tmp_path_factory.mktemp("egress")
    tag = uuid.uuid4().hex[:4]
    net = f"10.251.{random.randrange(256)}"
    upstream = CertificateAuthority.create("egress test upstream CA")
    stranger = CertificateAuthority.create("a CA nobody trusts")
    egress = CertificateAuthority.create("egress test egress CA")
    files: dict[str, bytes] = {"upstream-ca.crt": upstream.cert_pem, "egress-ca.crt": egress.cert_pem,
                               "egress-ca.key": egress.key_pem}  # fmt: skip
    good = upstream.issue("api.example.test", server=True,
                          dns_names=["api.example.test", "plain.example.test", "other.example.test"])  # fmt: skip
    forged = stranger.issue("forged.example.test", server=True)
    files |= {"good.crt": good.cert_pem, "good.key": good.key_pem, "forged.crt": forged.cert_pem,
              "forged.key": forged.key_pem}  # fmt: skip
    for name, data in files.items():
        (directory / name).write_bytes(data)
    hosts = directory / "hosts"
    names = {2: "api.example.test", 3: "plain.example.test", 4: "other.example.test", 6: "forged.example.test"}
    hosts.write_text("".join(f"{net}.{last} {name}\n" for last, name in names.items()))
    up, meta, guard = f"egu{tag}", f"egm{tag}", f"ATE-EGTEST-{tag}"
    record = directory / "record.jsonl"
    processes: list[subprocess.Popen[str]] = []
    uid, _ = squid_ids()
    try:
        for ns, host_address, ns_addresses in ((up, f"{net}.1/24", [f"{net}.{i}/24" for i in range(2, 7)]),
                                               (meta, "169.254.169.253/30", ["169.254.169.254/30"])):  # fmt: skip
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", f"{ns}h", "type", "veth", "peer", "name", f"{ns}n")
            sh("ip", "link", "set", f"{ns}n", "netns", ns)
            sh("ip", "addr", "add", host_address, "dev", f"{ns}h")
            sh("ip", "link", "set", f"{ns}h", "up")
            for address in ns_addresses:
                sh("ip", "-n", ns, "addr", "add", address, "dev", f"{ns}n")
            sh("ip", "-n", ns, "link", "set", f"{ns}n", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "route", "add", "default", "via", host_address.split("/")[0])
        # Squid's user reaches the stand-ins only, whatever the rules under test do.
        sh("iptables", "-w", "5", "-N", guard)
        for allowed in (f"{net}.0/24", "169.254.169.252/30", "127.0.0.0/8"):  # loopback: Squid's own helpers
            sh("iptables", "-w", "5", "-A", guard, "-d", allowed, "-j", "RETURN")
        sh("iptables", "-w", "5", "-A", guard, "-j", "REJECT")
        sh("iptables", "-w", "5", "-I", "OUTPUT", "1", *new_of(uid), "-j", guard)
        sh("ip6tables", "-w", "5", "-I", "OUTPUT", "1", "!", "-d", "::1", *new_of(uid), "-j", "REJECT", check=False)
        cert = f"{directory / 'good.crt'},{directory / 'good.key'}"
        processes.append(_serve(up, record, *(f"{net}.{i}={cert}" for i in (2, 3, 4, 5)),
                                f"{net}.6={directory / 'forged.crt'},{directory / 'forged.key'}"))  # fmt: skip
        processes.append(_serve(meta, record, f"169.254.169.254={cert}"))
        yield StandIns(directory, net, tag, record, directory / "upstream-ca.crt",
                       (directory / "egress-ca.crt", directory / "egress-ca.key"), hosts, processes)  # fmt: skip
    finally:
        for process in processes:
            process.kill()
            process.wait()
        sh("iptables", "-w", "5", "-D", "OUTPUT", *new_of(uid), "-j", guard, check=False)
        sh("iptables", "-w", "5", "-F", guard, check=False)
        sh("iptables", "-w", "5", "-X", guard, check=False)
        sh("ip6tables", "-w", "5", "-D", "OUTPUT", "!", "-d", "::1", *new_of(uid), "-j", "REJECT", check=False)
        for ns in (up, meta):
            sh("ip", "netns", "delete", ns, check=False)
            sh("ip", "link", "delete", f"{ns}h", check=False)


def policy(*, plain: bool = True) -> dict[str, Any]:
    """demo/egress's policy as the API's egress route answers it (with the secret's value)."""
    allow: list[dict[str, Any]] = [{"host": "api.example.test", "ports": [80, 443]},
                                   {"host": "forged.example.test", "ports": [443]},
                                   {"host": "node.example.test", "ports": [80]}]  # fmt: skip
    if plain:
        allow.append({"host": "plain.example.test", "ports": [80, 443]})
    credential = {"header": "x-api-key", "secret": "model-key", "value": SECRET}
    return {"allow": allow, "credentials": [{"host": "api.example.test", **credential},
                                            {"host": "forged.example.test", **credential}]}  # fmt: skip


async def fetch(worker_ip: str, url: str, **options: Any) -> dict[str, Any]:
    """The sandbox at ``worker_ip`` fetches ``url`` (the counter's POST /fetch)."""
    async with httpx.AsyncClient(timeout=30) as client:
        answer = await client.post(f"http://{worker_ip}:8080/fetch", json={"url": url, "timeout_seconds": 10, **options})
    answer.raise_for_status()
    return dict(answer.json())


def total(name: str, **labels: str) -> float:
    """The sum of the samples of counter ``name`` whose labels include ``labels``."""
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        for sample in metric.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


async def beat_after(api: FakeApi, node: str, mark: float) -> dict[str, bool]:
    """Each worker's ``egress_active`` in the first heartbeat of ``node`` that arrived after
    ``mark`` (monotonic seconds)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        beats = [r for r in api.of("PUT", f"/v1/nodes/{node}") if r.at > mark]
        if beats:
            return {w["name"]: w["egress_active"] for w in beats[0].body["workers"]}
        await asyncio.sleep(0.05)
    raise AssertionError(f"no heartbeat of {node} within 10 s")


def refused_at_once(result: dict[str, Any]) -> bool:
    """A connection error (no answer), well before the time-out."""
    return "error" in result and "status" not in result and result["elapsed_ms"] < DENIED_WITHIN_MS


def denied(result: dict[str, Any], words: str) -> bool:
    """A 403 of the proxy whose message holds ``words``, well before the time-out."""
    return result.get("status") == 403 and words in result.get("body", "") and result["elapsed_ms"] < DENIED_WITHIN_MS


def op() -> str:
    return f"op-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def listeners() -> Iterator[Listeners]:
    made = Listeners()
    for part in ("api", "postgresql"):
        made.open(part)
    try:
        yield made
    finally:
        made.close()


async def test_egress_follows_the_policy_from_inside_sandboxes(
    short_tmp: Path, counter_image: str, stand_ins: StandIns, listeners: Listeners, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="atelet.egress")
    s = stand_ins
    upstream_ca = s.upstream_ca.read_text()
    with fake_api() as api:
        api.egress = {"demo/egress": policy(), "demo/bare": {"allow": [], "credentials": []}}
        settings = make_settings(
            short_tmp, api_server=api.url, egress="on", egress_ca_cert_file=s.egress_ca[0],
            egress_ca_key_file=s.egress_ca[1], egress_upstream_ca_file=s.upstream_ca, egress_hosts_file=s.hosts,
            egress_dns_nameservers=["127.0.0.1"], egress_drain_seconds=EGRESS_DRAIN_SECONDS,
        )  # fmt: skip
        gateway = str(ipaddress.ip_network(settings.subnet)[1])  # worker 0's gateway: the node
        with s.hosts.open("a") as hosts:
            hosts.write(f"{gateway} node.example.test\n")
        try:
            async with running_atelet(settings) as atelet:
                await run_cases(atelet, api, s, gateway, upstream_ca, listeners, counter_image, caplog)
        finally:
            force_cleanup(settings)
    assert not [line for line in sh("iptables", "-t", "nat", "-S").stdout.splitlines()
                if rules.nat_chain(settings.node) in line]  # fmt: skip
    assert not [line for line in sh("iptables", "-S").stdout.splitlines() if rules.guard_chain(settings.node) in line]


async def run_cases(atelet: Atelet, api: FakeApi, s: StandIns, gateway: str, upstream_ca: str, listeners: Listeners,
                    image: str, caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    stub = atelet.stub
    one = await stub.Run(pb.RunRequest(operation_id=op(), worker="default-0", actor=EGRESS,
                                       spec=counter_spec(image), probe_timeout_seconds=30))  # fmt: skip
    two = await stub.Run(pb.RunRequest(operation_id=op(), worker="default-1", actor=BARE,
                                       spec=counter_spec(image), probe_timeout_seconds=30))  # fmt: skip
    ip, api_ip, plain_ip, other_ip, raw_ip = one.worker_ip, s.address(2), s.address(3), s.address(4), s.address(5)

    # The credential's host, through the proxy settings: the proxy terminates the actor's TLS
    # (which verifies against the egress CA in its bundle) and opens its own, verified against
    # the upstream CA; the header arrives with the secret's value, replacing the actor's own.
    seen = await fetch(ip, "https://api.example.test/a", headers={"x-api-key": "the-actors-own"})
    assert seen.get("status") == 200, seen
    echoed = json.loads(seen["body"])
    assert (echoed["headers"]["x-api-key"], echoed["sni"], echoed["tls"]) == (SECRET, "api.example.test", True)
    assert "via" not in echoed["headers"] and "x-forwarded-for" not in echoed["headers"]
    # ...and transparently (the sandbox dials the address; the proxy checks the name resolves to it).
    seen = await fetch(ip, "https://api.example.test/c", direct=True, dial=f"{api_ip}:443")
    assert seen.get("status") == 200 and json.loads(seen["body"])["headers"]["x-api-key"] == SECRET, seen
    # Never in clear: plain HTTP to the credential's host is refused, through the proxy or not.
    for options in ({}, {"direct": True, "dial": f"{api_ip}:80"}):
        assert denied(await fetch(ip, "http://api.example.test/b", **options), "use https://api.example.test")
    assert not [r for r in s.requests() if r["event"] == "request" and r["path"] == "/b"]

    # An outbound request in flight makes its actor active in the heartbeats (an idle policy
    # leaves it be), however long the upstream takes to answer; once answered and closed, not.
    slow = asyncio.create_task(fetch(ip, "https://api.example.test/slow/4000"))
    await asyncio.sleep(3.0)  # the upstream silent all along
    assert (await beat_after(api, atelet.settings.node, time.monotonic()))["default-0"] is True
    assert (await slow).get("status") == 200
    later = time.monotonic() + 1.5  # a heartbeat later (the counter closes its connection: no keep-alive)
    await asyncio.sleep(later - time.monotonic())
    assert await beat_after(api, atelet.settings.node, later) == {"default-0": False, "default-1": False}

    # A host without a credential: its TLS goes through untouched (the actor verifies the
    # upstream's own certificate), through the proxy settings or transparently.
    for options in ({}, {"direct": True, "dial": f"{plain_ip}:443"}):
        seen = await fetch(ip, "https://plain.example.test/e", ca_pem=upstream_ca, **options)
        assert seen.get("status") == 200, (options, seen)
        assert "x-api-key" not in json.loads(seen["body"])["headers"]

    # Refused at once: another host, by name through the proxy and dialled; a raw address; a
    # name dialled at an address it does not resolve to.
    assert denied(await fetch(ip, "https://other.example.test/f"), "no rule allows other.example.test port 443")
    assert denied(await fetch(ip, "http://other.example.test/f"), "no rule allows other.example.test port 80")
    assert refused_at_once(await fetch(ip, "https://other.example.test/g", direct=True, dial=f"{other_ip}:443",
                                       ca_pem=upstream_ca))  # fmt: skip
    assert denied(await fetch(ip, f"http://{raw_ip}/h"), f"no rule allows {raw_ip} port 80")
    assert refused_at_once(await fetch(ip, f"https://{raw_ip}/h", direct=True, ca_pem=upstream_ca))
    assert refused_at_once(await fetch(ip, f"http://{raw_ip}:8443/h", direct=True))  # not 80/443: reset
    conflict = await fetch(ip, "http://api.example.test/i", direct=True, dial=f"{raw_ip}:80")
    assert conflict.get("status") == 409, conflict

    # The node, its API and PostgreSQL ports, the other worker, the metadata address: refused.
    api_port, pg_port = listeners.ports["api"], listeners.ports["postgresql"]
    for target in (f"{gateway}:{api_port}", f"{gateway}:{pg_port}", f"{two.worker_ip}:8080", "169.254.169.254:80",
                   f"{s.address(1)}:{api_port}"):  # fmt: skip
        assert denied(await fetch(ip, f"http://{target}/"), "is in"), target  # through the proxy: protected
        assert refused_at_once(await fetch(ip, f"http://{target}/", direct=True)) or denied(
            await fetch(ip, f"http://{target}/", direct=True), "is in"), target  # fmt: skip
    assert denied(await fetch(ip, "http://node.example.test/"), "resolves to a protected address")
    assert refused_at_once(await fetch(ip, "https://169.254.169.254/", direct=True))
    assert listeners.accepted == []
    assert not [r for r in s.requests() if r["address"] == "169.254.169.254"]  # not even a connection

    # The proxy verifies the upstream of a connection it terminates: a forged server gets nothing.
    forged = await fetch(ip, "https://forged.example.test/j")
    assert forged.get("status") == 503, forged
    assert not [r for r in s.requests() if r["address"] == s.address(6) and r["event"] == "request"]

    # An actor without a policy is told so.
    assert denied(await fetch(two.worker_ip, "https://plain.example.test/k"), "has no egress policy")

    # Counted per actor and destination, and each denial logged with actor, destination and rule.
    assert total("ate_egress_requests_total", actor="demo/egress", destination="api.example.test:443") >= 2
    assert total("ate_egress_bytes_total", actor="demo/egress", destination="api.example.test:443",
                 direction="received") > 0  # fmt: skip
    rule = "no rule allows other.example.test port 443"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not total("ate_egress_denied_total", actor="demo/egress",
                                                    destination="other.example.test:443", rule="no rule allows"):  # fmt: skip
        await asyncio.sleep(0.05)
    assert total("ate_egress_denied_total", actor="demo/egress", destination="other.example.test:443",
                 rule="no rule allows") >= 2  # fmt: skip
    assert total("ate_egress_denied_total", actor="demo/bare", rule="no egress policy") == 1
    assert total("ate_egress_denied_total", actor="demo/egress", rule="protected address") >= 5
    assert any("egress denied: actor demo/egress -> other.example.test:443" in r.getMessage() and rule in r.getMessage()
               for r in caplog.records)  # fmt: skip
    assert SECRET not in caplog.text

    # A policy change applies to the next connection (the node keeps a policy a second at most).
    api.egress["demo/egress"] = policy(plain=False)
    await asyncio.sleep(1.1)
    assert denied(await fetch(ip, "https://plain.example.test/l", ca_pem=upstream_ca), "no rule allows plain")

    # A checkpoint waits for the actor's outbound request in flight (it is answered), and a FULL
    # checkpoint restored on the other worker still has its proxy, its CA and its credential.
    await stub.Terminate(pb.TerminateRequest(operation_id=op(), worker="default-1", actor=BARE))
    uri = f"file://{atelet.snapshot_root}/demo/egress/1"
    slow = asyncio.create_task(fetch(ip, "https://api.example.test/slow/1500"))
    await asyncio.sleep(0.3)
    ckpt = await stub.Checkpoint(pb.CheckpointRequest(operation_id=op(), worker="default-0", actor=EGRESS,
                                                      scope=pb.SNAPSHOT_SCOPE_FULL, snapshot_uri=uri))  # fmt: skip
    assert (await slow).get("status") == 200
    assert ckpt.egress_cut == 0 and 0.8 < ckpt.egress_wait_seconds < EGRESS_DRAIN_SECONDS, ckpt
    moved = await stub.Restore(pb.RestoreRequest(operation_id=op(), worker="default-1", actor=EGRESS,
                                                 spec=counter_spec(image), snapshot_uri=uri, manifest=ckpt.manifest,
                                                 probe_timeout_seconds=30))  # fmt: skip
    seen = await fetch(moved.worker_ip, "https://api.example.test/m")
    assert seen.get("status") == 200 and json.loads(seen["body"])["headers"]["x-api-key"] == SECRET, seen

    # One still unanswered at the drain timeout is cut (the actor sees its connection reset) and
    # the checkpoint says so; the snapshot is taken all the same.
    cut_before = total("ate_egress_cut_total", actor="demo/egress")
    hung = asyncio.create_task(fetch(moved.worker_ip, "https://api.example.test/slow/20000"))
    await asyncio.sleep(0.5)
    started = time.monotonic()
    checkpointing = asyncio.ensure_future(stub.Checkpoint(pb.CheckpointRequest(
        operation_id=op(), worker="default-1", actor=EGRESS, scope=pb.SNAPSHOT_SCOPE_FULL,
        snapshot_uri=f"file://{atelet.snapshot_root}/demo/egress/2")))  # fmt: skip
    await asyncio.sleep(1.0)  # while it drains, a new connection is refused at once (none enters the snapshot)
    assert refused_at_once(await fetch(moved.worker_ip, "https://api.example.test/late"))
    ckpt = await checkpointing
    assert not [line for line in sh("iptables", "-S", "INPUT").stdout.splitlines() if rules.drain_comment(
        atelet.settings.node) in line]  # let through again  # fmt: skip
    assert ckpt.egress_cut == 1 and EGRESS_DRAIN_SECONDS <= ckpt.egress_wait_seconds < EGRESS_DRAIN_SECONDS + 2, ckpt
    assert time.monotonic() - started < 15  # not the upstream's 20 s
    assert "error" in await hung
    assert total("ate_egress_cut_total", actor="demo/egress") == cut_before + 1


def files_holding(root: Path, needle: str) -> list[Path]:
    """Every regular file under ``root`` whose bytes contain ``needle``."""
    return [path for path in root.rglob("*") if path.is_file() and not path.is_symlink()
            and needle.encode() in path.read_bytes()]  # fmt: skip


async def test_a_full_snapshot_holds_no_secret_the_proxy_put_in(
    short_tmp: Path, counter_image: str, stand_ins: StandIns
) -> None:
    """Issue 28's test that matters: after requests whose credential the proxy added, a FULL
    snapshot of the actor (memory file, rootfs delta, durable dirs) holds none of the secret's
    bytes, while the upstream received them. The scan is shown able to find what the actor did
    hold: a canary it sent with the same requests is in the snapshot. Nor is the secret in any
    file of the node (its state dir, Squid's run dir)."""
    s = stand_ins
    secret, canary = f"sk-never-in-a-snapshot-{uuid.uuid4().hex}", f"canary-{uuid.uuid4().hex}"
    actor = pb.ActorRef(atespace="demo", name="secretive")
    with fake_api() as api:
        api.egress = {"demo/secretive": {
            "allow": [{"host": "api.example.test", "ports": [443]}],
            "credentials": [{"host": "api.example.test", "header": "x-api-key", "secret": "model-key", "value": secret}],
        }}  # fmt: skip
        settings = make_settings(
            short_tmp, api_server=api.url, egress="on", egress_ca_cert_file=s.egress_ca[0],
            egress_ca_key_file=s.egress_ca[1], egress_upstream_ca_file=s.upstream_ca, egress_hosts_file=s.hosts,
            egress_dns_nameservers=["127.0.0.1"], checkpoint_compression="none",
        )  # fmt: skip
        try:
            async with running_atelet(settings) as atelet:
                placed = await atelet.stub.Run(pb.RunRequest(operation_id=op(), worker="default-0", actor=actor,
                                                             spec=counter_spec(counter_image),
                                                             probe_timeout_seconds=30))  # fmt: skip
                for i in range(3):
                    seen = await fetch(placed.worker_ip, f"https://api.example.test/quiet/{i}",
                                       headers={"x-canary": canary})  # fmt: skip
                    assert (seen.get("status"), seen.get("body")) == (200, '{"ok": true}'), seen
                arrived = [r for r in s.requests() if r["event"] == "request" and r["headers"].get("x-canary") == canary]
                assert [(r["path"], r["headers"]["x-api-key"]) for r in arrived] == [
                    (f"/quiet/{i}", secret) for i in range(3)]  # fmt: skip
                run_dir = default_run_dir(settings.node)
                assert files_holding(run_dir, secret) == []
                squid_pid = int((run_dir / "squid.pid").read_text())  # and Squid can leave no core file
                [core] = [line.split()[4:6] for line in Path(f"/proc/{squid_pid}/limits").read_text().splitlines()
                          if line.startswith("Max core file size")]  # fmt: skip
                assert core == ["0", "0"]  # soft and hard limits
                snapshot = atelet.snapshot_root / "demo" / "secretive" / "1"
                await atelet.stub.Checkpoint(pb.CheckpointRequest(
                    operation_id=op(), worker="default-0", actor=actor, scope=pb.SNAPSHOT_SCOPE_FULL,
                    snapshot_uri=f"file://{snapshot}"))  # fmt: skip
                names = {path.name for path in snapshot.rglob("*") if path.is_file()}
                assert any(name.startswith("pages") for name in names), names  # the memory file is there
                assert files_holding(snapshot, canary) != []
                assert files_holding(snapshot, secret) == []
                assert files_holding(Path(settings.state_dir), secret) == []
        finally:
            force_cleanup(settings)
