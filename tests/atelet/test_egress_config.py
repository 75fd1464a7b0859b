"""What the atelet renders for egress, without running it: squid.conf (``squid_config.render``,
also parsed by the real Squid when installed), the nat and guard rules, the isolation chain's
openings and refusals, and what goes into a sandbox (``atelet.egress.sandbox``, ``atelet.bundle``)."""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path

import pytest

from ate.dev.certificates import CertificateAuthority
from atelet import isolation
from atelet.bundle import build_config
from atelet.egress import rules
from atelet.egress.sandbox import CA_BUNDLE, SandboxEgress, write_ca_bundle
from atelet.egress.squid import hosts_text, prepare_run_dir
from atelet.egress.squid_config import ACCESS_FORMAT, SquidPlan, collapsed, render
from atelet.images import UnpackedImage
from atelet.proto import atelet_pb2 as pb


def plan(tmp_path: Path, **overrides: object) -> SquidPlan:
    values: dict[str, object] = {
        "node": "n1", "gateways": ("10.88.0.1", "10.88.0.5"), "proxy_port": 8087, "http_port": 8088,
        "https_port": 8089, "run_dir": tmp_path / "run", "ca_cert": tmp_path / "ca.crt", "ca_key": tmp_path / "ca.key",
        "upstream_ca": tmp_path / "up.crt", "relay": tmp_path / "run/relay", "socket": tmp_path / "run/decide.sock",
        "certgen": Path("/usr/lib/squid/security_file_certgen"), "header_names": ("x-api-key", "authorization"),
        "protected": (ipaddress.ip_network("10.88.0.0/16"), ipaddress.ip_network("10.88.0.1/32")),
        "exceptions": (ipaddress.ip_network("10.88.7.0/24"),), "dns_nameservers": ("127.0.0.1",),
    }  # fmt: skip
    values.update(overrides)
    return SquidPlan(**values)  # type: ignore[arg-type]


def test_squid_listens_on_each_gateway_only_and_asks_the_atelet(tmp_path: Path) -> None:
    text = render(plan(tmp_path))
    listening = [line for line in text.splitlines() if line.startswith(("http_port", "https_port"))]
    assert [line.split()[1] for line in listening] == [f"{g}:{p}" for g in ("10.88.0.1", "10.88.0.5")
                                                       for p in (8087, 8088, 8089)]  # fmt: skip
    assert all(" intercept" in line for line in listening if ":8087" not in line)
    assert all("ssl-bump" in line for line in listening if ":8088" not in line)
    assert f"external_acl_type ate_policy ttl=0 negative_ttl=0 concurrency=64 children-max=4 children-startup=1 " \
           f"children-idle=1 %>a %>la %>lp %>rd %>rP %ssl::>sni %>rm {tmp_path}/run/relay acl " \
           f"{tmp_path}/run/decide.sock 2" in text  # fmt: skip
    assert f"access_log daemon:{tmp_path}/run/decide.sock ate" in text and f"logformat ate {ACCESS_FORMAT}" in text
    order = [line for line in text.splitlines() if line.startswith(("http_access", "ssl_bump"))]
    assert order == [
        "http_access allow ate_tls_intercept ate_connect ate_step1", "http_access deny !ate_policy",
        "http_access deny ate_protected !ate_excepted", "http_access allow all", "ssl_bump peek ate_step1",
        "ssl_bump terminate !ate_policy", "ssl_bump bump ate_bump", "ssl_bump splice all",
    ]  # fmt: skip
    for needed in ("host_verify_strict on", "via off", "client_idle_pconn_timeout 5 seconds", "coredump_dir none",
                   "forwarded_for delete", "cache deny all",
                   f"tls_outgoing_options cafile={tmp_path}/up.crt default-ca=off", "dns_nameservers 127.0.0.1",
                   f"hosts_file {tmp_path}/run/hosts", "acl ate_excepted dst 10.88.7.0/24"):  # fmt: skip
        assert needed in text.splitlines(), needed


def test_one_header_line_per_slot_added_only_where_annotated(tmp_path: Path) -> None:
    text = render(plan(tmp_path)).splitlines()
    assert [line for line in text if "ate_cred_1" in line] == [
        "acl ate_cred_1 note ate_cred_1",
        "request_header_access authorization deny ate_cred_1",
        "request_header_add authorization \"%'{ate_cred_1}note\" ate_cred_1",
    ]
    assert not [line for line in render(plan(tmp_path, header_names=())).splitlines() if "request_header" in line]


def test_protected_networks_reach_squid_without_overlaps(tmp_path: Path) -> None:
    """Squid ignores the wider of two overlapping ACL entries: the /16 must not lose to its /32."""
    [line] = [line for line in render(plan(tmp_path)).splitlines() if line.startswith("acl ate_protected dst")]
    entries = line.split()[3:]
    assert "10.88.0.0/16" in entries and "10.88.0.1/32" not in entries and "169.254.0.0/16" in entries
    assert "fe80::/10" in entries and "::/127" in entries  # ::/128 and ::1/128, merged
    assert not [e for e in entries if e.startswith("::ffff")]  # Squid would match every IPv4 address with it
    networks = [ipaddress.ip_network(e) for e in entries]
    assert not [(a, b) for a in networks for b in networks if a != b and a.version == b.version and a.overlaps(b)]  # type: ignore[arg-type]
    assert collapsed([ipaddress.ip_network("fe80::1/128"), ipaddress.ip_network("fe80::/10")]) == [
        ipaddress.ip_network("fe80::/10")]  # fmt: skip
    with pytest.raises(ValueError, match="gateway"):
        render(plan(tmp_path, gateways=()))


@pytest.mark.runsc  # the run dir is chowned to Squid's user (root)
def test_squid_itself_reads_the_configuration(tmp_path: Path) -> None:
    """The real Squid (scripts/install.sh installs squid-openssl) parses what is rendered, with the
    run dir the atelet makes (its relay, hosts file, error pages, certificate cache)."""
    ca = CertificateAuthority.create("egress test CA")
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    (tmp_path / "ca.key").write_bytes(ca.key_pem)
    (tmp_path / "up.crt").write_bytes(ca.cert_pem)
    tmp_path.chmod(0o755)
    the_plan = plan(tmp_path, exceptions=())
    prepare_run_dir(the_plan, None, {"10.88.0.2": "ate-worker-default-0"})
    assert (the_plan.errors_dir / "ERR_ACCESS_DENIED").exists() and the_plan.certificate_db.is_dir()
    conf = tmp_path / "squid.conf"
    conf.write_text(render(the_plan))
    parsed = subprocess.run(["squid", "-k", "parse", "-f", str(conf)], capture_output=True, text=True, timeout=30)
    problems = [line for line in parsed.stderr.splitlines()
                if any(w in line for w in ("FATAL", "ERROR", "Bungled", "unrecognized", "is ignored"))]  # fmt: skip
    assert parsed.returncode == 0 and problems == [], parsed.stderr[-2000:]


def test_the_hosts_file_names_every_worker(tmp_path: Path) -> None:
    source = tmp_path / "hosts"
    source.write_text("10.9.9.9 api.example.test")
    assert hosts_text(source, {"10.88.0.2": "ate-worker-default-0"}) == (
        "10.9.9.9 api.example.test\n10.88.0.2 ate-worker-default-0\n")  # fmt: skip


def test_nat_rules_redirect_the_proxy_the_web_ports_and_refuse_the_rest() -> None:
    chain = rules.nat_chain("n1")
    on = rules.nat_rules("n1", (8087, 8088, 8089)).splitlines()
    assert on == [
        "*nat", f":{chain} - [0:0]",
        f"-A {chain} -d 169.254.100.1/32 -p tcp -m tcp --dport 80 -j RETURN",
        f"-A {chain} -d 169.254.100.1/32 -p tcp -m tcp --dport 3128 -j REDIRECT --to-ports 8087",
        f"-A {chain} -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 8088",
        f"-A {chain} -p tcp -m tcp --dport 443 -j REDIRECT --to-ports 8089",
        f"-A {chain} -p tcp -j REDIRECT --to-ports 1", f"-A {chain} -p udp -j REDIRECT --to-ports 1", "COMMIT",
    ]  # fmt: skip
    off = rules.nat_rules("n1", None).splitlines()
    assert [line for line in off if "REDIRECT" in line] == on[-3:-1]
    served = rules.nat_rules("n1", None, local_endpoint_port=8086).splitlines()
    assert served[3] == f"-A {chain} -p tcp -m tcp --dport 8086 -m addrtype --dst-type LOCAL -j RETURN"
    guard = rules.guard_rules("n1", [ipaddress.ip_network("10.1.0.0/16"), ipaddress.ip_network("fd00::/8")],
                              protected=[ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10")])  # fmt: skip
    chain = rules.guard_chain("n1")
    assert [line for line in guard.splitlines() if line.startswith("-A")] == [
        f"-A {chain} -d 127.0.0.0/8 -j RETURN", f"-A {chain} -d 10.1.0.0/16 -j RETURN",
        f"-A {chain} -d 169.254.0.0/16 -p tcp -m conntrack --ctstate NEW -j REJECT --reject-with tcp-reset",
        f"-A {chain} -p tcp -m conntrack --ctstate NEW -m addrtype --dst-type LOCAL -j REJECT --reject-with tcp-reset",
    ]  # fmt: skip


def test_the_isolation_chain_admits_redirected_connections_and_refuses_the_rest() -> None:
    openings = [isolation.Opening("atv0", "10.88.0.2", "10.88.0.1", 8086),
                isolation.Opening("atv0", "10.88.0.2", "10.88.0.1", 8087, dnat=True)]  # fmt: skip
    chain = isolation.chain("n1")
    v4 = isolation.chain_rules("n1", openings).splitlines()
    assert v4[3:] == [
        f"-A {chain} -i atv0 -s 10.88.0.2/32 -d 10.88.0.1/32 -p tcp -m tcp --dport 8086 -j RETURN",
        f"-A {chain} -i atv0 -s 10.88.0.2/32 -d 10.88.0.1/32 -p tcp -m tcp --dport 8087 -m conntrack --ctstate DNAT "
        "-j RETURN",
        f"-A {chain} -p tcp -j REJECT --reject-with tcp-reset",
        f"-A {chain} -p udp -j REJECT --reject-with icmp-port-unreachable",
        f"-A {chain} -j DROP", "COMMIT",
    ]  # fmt: skip
    v6 = isolation.chain_rules("n1", openings, ipv4=False)
    assert "dport" not in v6 and "icmp6-port-unreachable" in v6


def test_a_sandbox_gets_the_proxy_and_the_ca_but_the_template_wins(tmp_path: Path) -> None:
    roots, ca = tmp_path / "roots.pem", tmp_path / "ca.pem"
    roots.write_text("ROOTS\n")
    ca.write_text("EGRESS CA\n")
    bundle = write_ca_bundle(tmp_path / "egress/ca-certificates.crt", roots, ca)
    assert bundle.read_text().startswith("ROOTS\n") and bundle.read_text().endswith("EGRESS CA\n")
    image = UnpackedImage(digest="sha256:x", rootfs=tmp_path, config={"process": {"env": ["PATH=/bin"]}})
    container = pb.Container(name="c", image="oci:x:y", env={"NO_PROXY": "mine"})
    config = build_config(image, container, "/run/netns/x", {}, egress=SandboxEgress(True, bundle))
    env = dict(e.split("=", 1) for e in config["process"]["env"])
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://169.254.100.1:3128"
    assert env["no_proxy"] == "169.254.100.1,localhost,127.0.0.1,::1" and env["NO_PROXY"] == "mine"
    assert env["SSL_CERT_FILE"] == env["NODE_EXTRA_CA_CERTS"] == env["GIT_SSL_CAINFO"] == CA_BUNDLE
    assert {"destination": CA_BUNDLE, "type": "bind", "source": str(bundle), "options": ["rbind", "ro"]} in config["mounts"]
    off = build_config(image, container, "/run/netns/x", {}, egress=SandboxEgress(False, bundle))
    assert "HTTPS_PROXY=http://169.254.100.1:3128" not in off["process"]["env"]
