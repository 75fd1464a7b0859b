"""Egress from inside a microvm guest (issue 28: the same on both sandbox classes), on real QEMU
(TCG) and the node's real Squid: a request through the proxy settings reaches an allowed
stand-in with the credential added (the guest trusts the egress CA, written into its
initramfs), a transparent one too, plain HTTP to a host without credential is intercepted and
let through, and another host is refused. The stand-ins are those of
tests/atelet/test_egress.py, in namespaces the test makes: nothing leaves the machine."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from atelet.proto import atelet_pb2 as pb
from tests.atelet.conftest import counter_spec, force_cleanup, make_settings, running_atelet
from tests.atelet.fake_api import fake_api
from tests.atelet.test_egress import StandIns, denied, fetch, stand_ins
from tests.microvm.test_atelet_microvm import PROBE_SECONDS, kill_vms

__all__ = ["stand_ins"]
pytestmark = [pytest.mark.qemu, pytest.mark.asyncio, pytest.mark.timeout(300)]
ACTOR = pb.ActorRef(atespace="demo", name="vm-egress")


async def test_a_microvm_guest_reaches_what_its_policy_allows_with_the_credential_added(
    short_tmp: Path, kernel_dir: Path, counter_image: str, stand_ins: StandIns
) -> None:
    s = stand_ins
    secret = f"sk-vm-{uuid.uuid4().hex}"
    with fake_api() as api:
        api.egress = {"demo/vm-egress": {
            "allow": [{"host": "api.example.test", "ports": [443]}, {"host": "plain.example.test", "ports": [80]}],
            "credentials": [{"host": "api.example.test", "header": "x-api-key", "secret": "model-key", "value": secret,
                             "problem": None}],
        }}  # fmt: skip
        settings = make_settings(
            short_tmp, workers=0, microvm_workers=1, microvm_kernel_dir=kernel_dir, microvm_accelerator="tcg",
            microvm_durable_dir_mib=32, api_server=api.url, egress="on", egress_ca_cert_file=s.egress_ca[0],
            egress_ca_key_file=s.egress_ca[1], egress_upstream_ca_file=s.upstream_ca, egress_hosts_file=s.hosts,
            egress_dns_nameservers=["127.0.0.1"],
        )  # fmt: skip
        try:
            async with running_atelet(settings) as atelet:
                run = await atelet.stub.Run(pb.RunRequest(operation_id="op-vm-egress", worker="microvm-0", actor=ACTOR,
                                                          spec=counter_spec(counter_image),
                                                          probe_timeout_seconds=PROBE_SECONDS))  # fmt: skip
                ip = run.worker_ip
                seen = await fetch(ip, "https://api.example.test/vm")  # the proxy settings; the egress CA trusted
                assert seen.get("status") == 200, seen
                echoed = json.loads(seen["body"])
                assert (echoed["headers"]["x-api-key"], echoed["sni"]) == (secret, "api.example.test")
                seen = await fetch(ip, "https://api.example.test/vm", direct=True, dial=f"{s.address(2)}:443")
                assert seen.get("status") == 200 and json.loads(seen["body"])["headers"]["x-api-key"] == secret, seen
                seen = await fetch(ip, "http://plain.example.test/vm", direct=True, dial=f"{s.address(3)}:80")
                assert seen.get("status") == 200 and "x-api-key" not in json.loads(seen["body"])["headers"], seen
                assert denied(await fetch(ip, "https://other.example.test/vm"), "no rule allows other.example.test")
                await atelet.stub.Terminate(pb.TerminateRequest(operation_id="op-vm-egress-t", worker="microvm-0",
                                                                actor=ACTOR))  # fmt: skip
        finally:
            kill_vms(settings)
            force_cleanup(settings)
