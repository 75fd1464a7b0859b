"""`ate dev`'s local CA and certificates (ate/dev/certificates.py): the shape mutual TLS needs,
kept across starts while still good, made again when not."""

from __future__ import annotations

import datetime
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from ate.dev.certificates import CertificateAuthority, ensure_local_certificates


def contents(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def certificate(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_the_ca_issues_a_control_plane_and_a_node_certificate_of_the_right_shape(tmp_path: Path) -> None:
    files = ensure_local_certificates(tmp_path, ["n1"])
    ca = certificate(files.ca)
    assert sorted(contents(tmp_path)) == [
        "ca.crt", "ca.key", "control-plane.crt", "control-plane.key", "nodes/n1.crt", "nodes/n1.key",
    ]  # fmt: skip
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    node = certificate(files.node("n1").cert)
    node.verify_directly_issued_by(ca)
    assert node.subject.rfc4514_string() == "CN=n1"
    assert node.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName
    ) == ["n1"]
    assert list(node.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH,
        ExtendedKeyUsageOID.CLIENT_AUTH,
    ]
    control_plane = certificate(files.control_plane.cert)
    control_plane.verify_directly_issued_by(ca)
    assert control_plane.subject.rfc4514_string() == "CN=ate-control-plane"
    assert list(control_plane.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.CLIENT_AUTH
    ]
    for key in ("ca.key", "control-plane.key", "nodes/n1.key"):
        assert (tmp_path / key).stat().st_mode & 0o777 == 0o600


def test_a_second_start_keeps_everything_and_a_new_node_adds_only_its_own(tmp_path: Path) -> None:
    ensure_local_certificates(tmp_path, ["n1"])
    first = contents(tmp_path)
    ensure_local_certificates(tmp_path, ["n1"])
    assert contents(tmp_path) == first
    ensure_local_certificates(tmp_path, ["n2"])
    second = contents(tmp_path)
    assert {k: v for k, v in second.items() if not k.startswith("nodes/n2")} == first
    assert "nodes/n2.crt" in second


def test_a_broken_or_foreign_certificate_is_made_again_alone(tmp_path: Path) -> None:
    files = ensure_local_certificates(tmp_path, ["n1", "n2"])
    first = contents(tmp_path)
    files.node("n1").cert.write_text("not a certificate")
    foreign = CertificateAuthority.create().issue_control_plane()  # right name, wrong issuer
    files.control_plane.cert.write_bytes(foreign.cert_pem)
    files.control_plane.key.write_bytes(foreign.key_pem)
    ensure_local_certificates(tmp_path, ["n1", "n2"])
    now = contents(tmp_path)
    changed = sorted(k for k in now if now[k] != first[k])
    assert changed == ["control-plane.crt", "control-plane.key", "nodes/n1.crt", "nodes/n1.key"]
    ca = certificate(files.ca)
    certificate(files.node("n1").cert).verify_directly_issued_by(ca)
    certificate(files.control_plane.cert).verify_directly_issued_by(ca)


def test_a_certificate_about_to_expire_is_renewed(tmp_path: Path) -> None:
    files = ensure_local_certificates(tmp_path, ["n1"])
    ca = CertificateAuthority.load(files.ca.read_bytes(), (tmp_path / "ca.key").read_bytes())
    now = datetime.datetime.now(datetime.UTC)
    expiring = ca.issue("n1", server=True, not_after=now + datetime.timedelta(hours=2))
    files.node("n1").cert.write_bytes(expiring.cert_pem)
    files.node("n1").key.write_bytes(expiring.key_pem)
    ensure_local_certificates(tmp_path, ["n1"])
    assert certificate(files.node("n1").cert).not_valid_after_utc > now + datetime.timedelta(days=300)


def test_a_missing_ca_key_makes_everything_again(tmp_path: Path) -> None:
    files = ensure_local_certificates(tmp_path, ["n1"])
    first = contents(tmp_path)
    (tmp_path / "ca.key").unlink()
    ensure_local_certificates(tmp_path, ["n1"])
    now = contents(tmp_path)
    assert all(now[k] != first[k] for k in first)
    certificate(files.node("n1").cert).verify_directly_issued_by(certificate(files.ca))
