"""A local certificate authority and the certificates of the atelet's mutual TLS, for `ate dev`,
the test harnesses and the benchmarks (production takes its certificates from files, e.g.
cert-manager: docs/security.md).

The shape (the same one production certificates must have):
- one CA (`ca.crt`, `ca.key`): it issues every certificate below, and every part trusts only it;
- the control plane's client certificate (`control-plane.crt`/`.key`): CN `ate-control-plane`,
  extended key usage client auth only. The atelets accept gRPC calls only from it;
- one certificate per node (`nodes/<node>.crt`/`.key`): CN and SAN DNS name = the node name,
  extended key usage server auth and client auth. It is the atelet's gRPC server certificate
  (clients check the name, `grpc.ssl_target_name_override`, as nodes are reached by IP) and
  the node's identity towards the API (registrations signed with its key).

Keys are ECDSA P-256, written mode 0600. `ensure_local_certificates` is idempotent: what exists
and is still good (issued by this CA, the right names, valid for another day) is kept; anything
else is made again, everything when the CA itself is missing or expiring.
"""

from __future__ import annotations

import datetime
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CONTROL_PLANE = "ate-control-plane"
"""The common name of the control plane's client certificate (the atelets' default allow-list)."""

CA_LIFETIME = datetime.timedelta(days=3650)
LEAF_LIFETIME = datetime.timedelta(days=365)
RENEW_BEFORE = datetime.timedelta(days=1)
"""A certificate valid for less than this is made again by `ensure_local_certificates`."""
BACKDATE = datetime.timedelta(minutes=5)
"""Certificates start this long before they are made (clocks of one machine still differ a little)."""

_KEY_ENCODING = serialization.PrivateFormat.PKCS8


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_usage(signs_certificates: bool) -> x509.KeyUsage:
    """Digital signature (ECDSA keys sign handshakes and tokens), plus certificate and CRL signing for a CA."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, _KEY_ENCODING, serialization.NoEncryption())


@dataclass(frozen=True)
class IssuedCertificate:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        """The parsed certificate."""
        return x509.load_pem_x509_certificate(self.cert_pem)


@dataclass(frozen=True)
class CertificateAuthority:
    """A CA that issues the control plane's and the nodes' certificates."""

    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def create(
        cls, common_name: str = "ate local CA", lifetime: datetime.timedelta = CA_LIFETIME
    ) -> CertificateAuthority:
        """A new self-signed CA (ECDSA P-256) valid from now for `lifetime`."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + lifetime)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(signs_certificates=True), critical=True)
            .add_extension(ski, critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(certificate, key)

    @classmethod
    def load(cls, cert_pem: bytes, key_pem: bytes) -> CertificateAuthority:
        """The CA of a PEM certificate and its PEM (unencrypted EC) key.

        Raises:
            ValueError: not a certificate, not an EC key, or the key is not the certificate's.
        """
        certificate = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != certificate.public_key():
            raise ValueError("the CA key is not the CA certificate's key")
        return cls(certificate, key)

    @property
    def cert_pem(self) -> bytes:
        """The CA certificate, PEM (what every part trusts)."""
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        """The CA's private key, PEM."""
        return _key_pem(self.key)

    def issue(
        self,
        common_name: str,
        *,
        server: bool,
        client: bool = True,
        dns_names: Iterable[str] | None = None,
        not_before: datetime.datetime | None = None,
        not_after: datetime.datetime | None = None,
    ) -> IssuedCertificate:
        """A leaf certificate for `common_name` with a new ECDSA P-256 key.

        Args:
            common_name: the subject CN (a node name, or `ate-control-plane`).
            server: with extended key usage server auth (a node's certificate).
            client: with extended key usage client auth.
            dns_names: SAN DNS names; default: `[common_name]`.
            not_before / not_after: the validity window; default: from a few minutes ago for
                LEAF_LIFETIME (tests pass others, e.g. an expired one).
        """
        key = ec.generate_private_key(ec.SECP256R1())
        start = not_before or _now() - BACKDATE
        end = not_after or start + LEAF_LIFETIME
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * client
        names = list(dns_names) if dns_names is not None else [common_name]
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(signs_certificates=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        if names:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False
            )
        certificate = builder.sign(self.key, hashes.SHA256())
        return IssuedCertificate(certificate.public_bytes(serialization.Encoding.PEM), _key_pem(key))

    def issue_node(self, node: str) -> IssuedCertificate:
        """A node's certificate: CN and SAN DNS name `node`, server and client auth."""
        return self.issue(node, server=True)

    def issue_control_plane(self) -> IssuedCertificate:
        """The control plane's client certificate: CN `ate-control-plane`, client auth only."""
        return self.issue(CONTROL_PLANE, server=False)


@dataclass(frozen=True)
class CertificateFiles:
    """Where one identity lies: its certificate, its key, and the CA it trusts (all PEM files)."""

    cert: Path
    key: Path
    ca: Path


@dataclass(frozen=True)
class LocalCertificates:
    """The files of `ensure_local_certificates` under `directory`."""

    directory: Path

    @property
    def ca(self) -> Path:
        """The CA certificate every part trusts."""
        return self.directory / "ca.crt"

    @property
    def control_plane(self) -> CertificateFiles:
        """The control plane's client identity (the Temporal worker's atelet client)."""
        return CertificateFiles(self.directory / "control-plane.crt", self.directory / "control-plane.key", self.ca)

    def node(self, name: str) -> CertificateFiles:
        """Node `name`'s identity (its atelet's server certificate and registration key)."""
        return CertificateFiles(
            self.directory / "nodes" / f"{name}.crt", self.directory / "nodes" / f"{name}.key", self.ca
        )


def _write(path: Path, data: bytes, mode: int) -> None:
    """Writes `path` atomically with permissions `mode`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _still_good(certificate: x509.Certificate, now: datetime.datetime) -> bool:
    return certificate.not_valid_before_utc <= now and now + RENEW_BEFORE < certificate.not_valid_after_utc


def _load_ca(files: LocalCertificates, now: datetime.datetime) -> CertificateAuthority | None:
    try:
        ca = CertificateAuthority.load(files.ca.read_bytes(), (files.directory / "ca.key").read_bytes())
    except (OSError, ValueError):
        return None
    return ca if _still_good(ca.certificate, now) else None


def _leaf_is_good(
    ca: CertificateAuthority, identity: CertificateFiles, common_name: str, server: bool, now: datetime.datetime
) -> bool:
    """Whether the leaf at `identity` was issued by `ca` for `common_name` with the right usage and key."""
    try:
        certificate = x509.load_pem_x509_certificate(identity.cert.read_bytes())
        key = serialization.load_pem_private_key(identity.key.read_bytes(), password=None)
        certificate.verify_directly_issued_by(ca.certificate)
        usage = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    except (OSError, ValueError, TypeError, InvalidSignature, x509.ExtensionNotFound):
        return False
    return (
        [n.value for n in names] == [common_name]
        and (ExtendedKeyUsageOID.SERVER_AUTH in usage) == server
        and key.public_key() == certificate.public_key()
        and _still_good(certificate, now)
    )


def ensure_local_certificates(directory: Path, nodes: Iterable[str]) -> LocalCertificates:
    """Makes (or keeps) the local CA, the control plane's certificate and one per node in `directory`.

    Args:
        directory: where the files go (created; `ca.key` and every key mode 0600).
        nodes: the node names that need a certificate; other nodes' files are left alone.

    Returns:
        Where the files are.

    Raises:
        OSError: the directory cannot be written.
        ValueError: a node name is not a valid DNS name (it is the certificate's SAN).
    """
    files = LocalCertificates(directory)
    now = _now()
    ca = _load_ca(files, now)
    fresh = ca is None
    if ca is None:
        ca = CertificateAuthority.create(f"ate local CA ({directory.resolve()})"[:64])
        _write(directory / "ca.key", ca.key_pem, 0o600)
        _write(files.ca, ca.cert_pem, 0o644)
    wanted = [(files.control_plane, CONTROL_PLANE, False)] + [(files.node(n), n, True) for n in nodes]
    for identity, common_name, server in wanted:
        if not fresh and _leaf_is_good(ca, identity, common_name, server, now):
            continue
        issued = ca.issue(common_name, server=server)
        _write(identity.key, issued.key_pem, 0o600)
        _write(identity.cert, issued.cert_pem, 0o644)
    return files
