"""The atelet serves only mutual TLS and only the control plane (atelet/tls.py), and the control
plane's channels reach only the node they mean (activities/atelet_tls.py): real gRPC over real
TLS against hollow atelets, certificates from the test session's CA and from a CA of its own."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import grpc
import pytest
from temporalio.exceptions import ApplicationError

from activities.atelet import AteletActivities
from activities.atelet_tls import AteletClientTls, AteletTlsError, target_options
from ate.dev.certificates import CertificateAuthority, IssuedCertificate
from atelet.main import serve
from atelet.proto import atelet_pb2 as pb
from atelet.proto import atelet_pb2_grpc as pb_grpc
from atelet.settings import AteletSettings
from atelet.tls import TlsConfigError
from domain.operations.atelet_calls import AteletTerminateInput
from domain.refs import ActorRef, WorkerRef
from tests.atelet.conftest import REPO, certificates, control_plane_tls, make_settings, running_atelet


def write(base: Path, name: str, issued: IssuedCertificate, ca_pem: bytes) -> AteletClientTls:
    """Files of one client identity under `base`."""
    (base / f"{name}.crt").write_bytes(issued.cert_pem)
    (base / f"{name}.key").write_bytes(issued.key_pem)
    (base / f"{name}-ca.crt").write_bytes(ca_pem)
    return AteletClientTls(base / f"{name}.crt", base / f"{name}.key", base / f"{name}-ca.crt")


async def health(channel: grpc.aio.Channel) -> pb.HealthResponse:
    async with channel:
        response: pb.HealthResponse = await pb_grpc.AteletStub(channel).Health(pb.HealthRequest(), timeout=10)  # type: ignore[no-untyped-call]
        return response


async def refused(channel: grpc.aio.Channel) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await health(channel)
    return caught.value


async def test_the_control_planes_certificate_is_served(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, hollow=True)
    async with running_atelet(settings):
        answer = await health(control_plane_tls().channel(settings.listen, settings.node))
    assert [w.name for w in answer.workers] == ["default-0", "default-1"]


async def test_a_plaintext_client_is_refused(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, hollow=True)
    async with running_atelet(settings):
        error = await refused(grpc.aio.insecure_channel(settings.listen))
    assert error.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_client_without_a_certificate_is_refused(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, hollow=True)
    ca = certificates().ca.read_bytes()
    async with running_atelet(settings):
        no_certificate = grpc.ssl_channel_credentials(root_certificates=ca)
        error = await refused(
            grpc.aio.secure_channel(settings.listen, no_certificate, options=target_options(settings.node))
        )
    assert error.code() == grpc.StatusCode.UNAVAILABLE  # the handshake fails: no call reaches the service


async def test_a_control_plane_certificate_from_another_ca_is_refused(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, hollow=True)
    impostor = CertificateAuthority.create("ate local CA").issue_control_plane()  # same CN, other CA
    tls = write(tmp_path, "impostor", impostor, certificates().ca.read_bytes())  # still trusts the real server
    async with running_atelet(settings):
        error = await refused(tls.channel(settings.listen, settings.node))
    assert error.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_node_certificate_is_refused_with_a_message_naming_it(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, hollow=True)
    other = f"{settings.node}x"
    files = certificates(other).node(other)
    as_node = AteletClientTls(files.cert, files.key, files.ca)
    async with running_atelet(settings):
        error = await refused(as_node.channel(settings.listen, settings.node))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error.details() == (
        f"the atelet of node {settings.node} takes calls only from the control plane's client certificate; "
        f"this one has CN '{other}', which is not in the atelet's tls_allowed_clients"
    )


async def test_the_allow_list_is_a_setting(tmp_path: Path) -> None:
    other = "operator-tool"
    issued = CertificateAuthority.load(
        certificates().ca.read_bytes(), (certificates().directory / "ca.key").read_bytes()
    ).issue(other, server=False)
    tool = write(tmp_path, "tool", issued, certificates().ca.read_bytes())
    settings = make_settings(tmp_path, hollow=True, tls_allowed_clients=[other])
    async with running_atelet(settings):
        await health(tool.channel(settings.listen, settings.node))
        error = await refused(control_plane_tls().channel(settings.listen, settings.node))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_a_client_expecting_node_a_refuses_node_bs_atelet(tmp_path: Path) -> None:
    a = make_settings(tmp_path / "a", hollow=True)
    b = make_settings(tmp_path / "b", hollow=True)
    async with running_atelet(a), running_atelet(b):
        error = await refused(control_plane_tls().channel(b.listen, a.node))  # a's name, b's address
        await health(control_plane_tls().channel(b.listen, b.node))
    assert error.code() == grpc.StatusCode.UNAVAILABLE


async def test_activities_reach_the_worker_s_node_and_refuse_another_at_its_address(tmp_path: Path) -> None:
    a = make_settings(tmp_path / "a", hollow=True)
    b = make_settings(tmp_path / "b", hollow=True)
    activities = AteletActivities(tls=control_plane_tls(), call_timeout_seconds=10)
    holder = ActorRef("demo", "c1")

    def terminate(node: str, address: str) -> AteletTerminateInput:
        worker = WorkerRef(
            worker_id=1, pool="default", name="default-0", node=node, ip="10.0.0.2", atelet_address=address
        )
        return AteletTerminateInput(operation_id=uuid.uuid4().hex, worker=worker, holder=holder)

    try:
        async with running_atelet(a), running_atelet(b):
            assert await activities.terminate(terminate(a.node, a.listen)) is False  # nothing ran there
            with pytest.raises(ApplicationError) as caught:
                await asyncio.wait_for(activities.terminate(terminate(a.node, b.listen)), 30)
    finally:
        await activities.close()
    assert caught.value.type == "AteletUnavailable"  # retried: the address may be a's again later
    assert "Hostname Verification Check failed" in caught.value.message


async def test_a_renewed_node_certificate_is_served_to_new_connections(tmp_path: Path) -> None:
    ca = CertificateAuthority.load(certificates().ca.read_bytes(), (certificates().directory / "ca.key").read_bytes())
    node = make_settings(tmp_path, hollow=True).node
    cert, key = tmp_path / "node.crt", tmp_path / "node.key"
    issued = ca.issue_node(node)
    cert.write_bytes(issued.cert_pem)
    key.write_bytes(issued.key_pem)
    settings = make_settings(tmp_path, hollow=True, node=node, tls_cert=cert, tls_key=key)
    async with running_atelet(settings):
        await health(control_plane_tls().channel(settings.listen, node))
        renewed = ca.issue_node("renamed")  # a name the clients can tell apart
        (tmp_path / "new.key").write_bytes(renewed.key_pem)
        (tmp_path / "new.crt").write_bytes(renewed.cert_pem)
        os.replace(tmp_path / "new.key", key)  # as cert-manager's csi-driver renews: file by file
        os.replace(tmp_path / "new.crt", cert)
        await health(control_plane_tls().channel(settings.listen, "renamed"))
        error = await refused(control_plane_tls().channel(settings.listen, node))
    assert error.code() == grpc.StatusCode.UNAVAILABLE


async def test_the_atelet_does_not_start_without_its_certificates(tmp_path: Path) -> None:
    settings = AteletSettings(**{**make_settings(tmp_path, hollow=True).model_dump(), "tls_key": None})
    with pytest.raises(TlsConfigError) as caught:
        await serve(settings)
    assert str(caught.value).startswith("--tls-key not set: the atelet serves only mutual TLS")


async def test_the_atelet_does_not_start_with_a_key_of_another_certificate(tmp_path: Path) -> None:
    base = make_settings(tmp_path, hollow=True)
    other = f"{base.node}o"
    settings = AteletSettings(**{**base.model_dump(), "tls_key": certificates(other).node(other).key})
    with pytest.raises(TlsConfigError) as caught:
        await serve(settings)
    assert "is not the key of the certificate in" in str(caught.value)


def test_the_command_line_says_what_is_missing(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "atelet",
            "--node",
            "n1",
            "--hollow",
            "--state-dir",
            str(tmp_path),
            "--metrics-listen",
            "",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("atelet: --tls-cert, --tls-key, --tls-ca not set:")


def test_the_control_plane_without_its_certificates_names_the_settings() -> None:
    with pytest.raises(AteletTlsError) as caught:
        AteletClientTls.from_settings(None, Path("k"), None, "ate_atelet_client_tls")
    assert str(caught.value).startswith("ATE_ATELET_CLIENT_TLS_CERT, ATE_ATELET_CLIENT_TLS_CA not set:")
