"""The egress decision, the policy document, the access log and the header slots, without Squid
(``atelet.egress.decision``, ``policies``, ``access_log``, ``header_slots``, ``relay``)."""

from __future__ import annotations

import io
import ipaddress
from pathlib import Path

import pytest

from atelet.egress.access_log import classify, parse_line
from atelet.egress.decision import Ask, Protection, Verdict, decide, parse_ask, quote
from atelet.egress.header_slots import HeaderSlots
from atelet.egress.policies import read_document
from atelet.egress.relay import UNREACHABLE, helper
from atelet.egress.squid_config import ACCESS_FIELDS
from domain.egress import parse_egress_policy
from domain.idle import PolicyError

POLICY = parse_egress_policy({
    "allow": [{"host": "api.example.com", "ports": [443]}, {"host": "*.pypi.example", "ports": [443]},
              {"cidr": "10.20.0.0/16", "ports": [5432, 443]}],
    "credentials": [{"host": "api.example.com", "header": "x-api-key", "secret": "model-key"}],
})  # fmt: skip
PROTECTION = Protection((ipaddress.ip_network("10.88.0.0/16"), ipaddress.ip_network("192.0.2.7/32")),
                        (ipaddress.ip_network("10.88.9.0/24"),))  # fmt: skip
VALUES = {"api.example.com": "sk-1"}
SLOTS = {"x-api-key": 3}


def ask(host: str, port: int = 443, sni: str | None = None, method: str = "CONNECT") -> Ask:
    return Ask("10.88.0.2", "10.88.0.1", 8087, host, port, sni, method)


def verdict(a: Ask, slots: dict[str, int] = SLOTS, values: dict[str, str] = VALUES) -> Verdict:
    return decide(a, "demo/a", POLICY, PROTECTION, values, slots)


def test_helper_lines_are_read_leniently() -> None:
    assert parse_ask("10.88.0.2 10.88.0.1 8087 API.Example.com. 443 - CONNECT -".split()) == ask("api.example.com")
    assert parse_ask(["10.88.0.2", "10.20.1.1", "443", "10.20.1.1", "443", "pkg.pypi.example"]).sni == "pkg.pypi.example"
    assert parse_ask(["10.88.0.2", "-", "x", "%5B::1%5D"]) == Ask("10.88.0.2", "", 0, "::1", 0, None, "")


INNER = {"sni": "api.example.com", "method": "GET"}
"""A request inside the terminated TLS of the credential's host."""


def test_a_host_with_a_credential_is_bumped_and_its_requests_get_the_value_in_its_slot() -> None:
    tunnel = verdict(ask("api.example.com"))
    assert (tunnel.allowed, tunnel.bump, tunnel.credential) == (True, True, None)  # the CONNECT: no request yet
    v = verdict(ask("api.example.com", **INNER))
    assert (v.allowed, v.bump, v.rule, v.destination) == (True, True, "allow[0] (host api.example.com ports 443)",
                                                           "api.example.com:443")  # fmt: skip
    assert v.credential is not None and (v.credential.slot, v.credential.value) == (3, "sk-1")
    assert "sk-1" not in repr(v)
    assert v.reply() == ('OK ate_actor="demo/a" ate_rule="allow[0] (host api.example.com ports 443)" ate_bump=1 '
                         'ate_cred_3="sk-1"')  # fmt: skip


def test_the_credential_goes_only_inside_tls_to_requests_naming_its_host_alone() -> None:
    # domain fronting: a request whose Host is another allowed host, inside the credential host's TLS
    fronted = verdict(ask("evil.pypi.example", **INNER))
    assert (fronted.allowed, fronted.rule, fronted.credential) == (False, "credential host mismatch", None)
    assert "this one also names evil.pypi.example" in fronted.message
    # an explicit CONNECT to the credential's host whose TLS names another allowed host
    assert verdict(ask("api.example.com", sni="a.pypi.example")).rule == "credential host mismatch"
    # intercepted TLS: the dialled address is not a name (Squid checks the SNI resolves to it)
    assert verdict(ask("203.0.113.9", **INNER)).credential is not None
    # plain HTTP to the credential's host (allowed on port 80 here): never in clear
    plain_ok = parse_egress_policy({"allow": [{"host": "api.example.com", "ports": [80, 443]}],
                                    "credentials": [{"host": "api.example.com", "header": "x-api-key", "secret": "k"}]})  # fmt: skip
    clear = decide(ask("api.example.com", 80, method="GET"), "demo/a", plain_ok, PROTECTION, VALUES, SLOTS)
    assert (clear.allowed, clear.rule) == (False, "credential needs TLS")
    assert "use https://api.example.com" in clear.message and "sk-1" not in clear.reply()
    traced = verdict(ask("api.example.com", sni="api.example.com", method="TRACE"))
    assert (traced.allowed, traced.rule, traced.credential) == (False, "credential echo", None)


def test_allowed_without_credential_and_denied_by_name_port_or_sni() -> None:
    assert verdict(ask("a.pypi.example")) == Verdict(True, "demo/a", "a.pypi.example:443",
                                                     "allow[1] (host *.pypi.example ports 443)")  # fmt: skip
    denied = verdict(ask("pypi.example"))
    assert (denied.allowed, denied.rule) == (False, "no rule allows pypi.example port 443")
    assert denied.reply().startswith('ERR ate_actor="demo/a" ate_rule="no rule allows pypi.example port 443" '
                                     "ate_denied=1 message=")  # fmt: skip
    assert not verdict(ask("api.example.com", 80)).allowed
    # an explicit CONNECT to an allowed name whose TLS names another: both must be allowed
    assert not verdict(ask("a.pypi.example", sni="evil.example")).allowed


def test_addresses_are_decided_by_cidr_rules_and_protection_first() -> None:
    assert verdict(ask("10.20.3.4", 5432)).allowed
    assert not verdict(ask("10.21.3.4", 5432)).allowed
    for protected in ("10.88.0.1", "192.0.2.7", "169.254.169.254", "127.0.0.1", "::1", "::ffff:169.254.169.254"):
        v = verdict(ask(protected, 443))
        assert (v.allowed, v.rule) == (False, "protected address"), protected
    assert verdict(ask("10.88.9.9", 443)).rule == "no rule allows 10.88.9.9 port 443"  # an exception: policy decides


def test_intercepted_tls_is_decided_on_its_sni_but_a_protected_address_never_passes() -> None:
    v = verdict(ask("203.0.113.9", sni="api.example.com"))
    assert (v.allowed, v.bump, v.destination) == (True, True, "api.example.com:443")
    assert verdict(ask("10.88.0.1", sni="api.example.com")).rule == "protected address"
    assert not verdict(ask("203.0.113.9")).allowed  # no SNI, no cidr rule


def test_no_policy_missing_values_and_unloaded_headers_are_refused_saying_why() -> None:
    none = decide(ask("api.example.com"), "demo/b", parse_egress_policy(None), PROTECTION, {}, {})
    assert (none.allowed, none.rule) == (False, "no egress policy")
    assert "actor demo/b has no egress policy" in none.message
    assert verdict(ask("api.example.com", **INNER), values={}).rule == "credential unavailable"
    assert verdict(ask("api.example.com", **INNER), values={"api.example.com": "a\r\nb"}).rule == "credential unusable"
    loading = verdict(ask("api.example.com", **INNER), slots={})
    assert (loading.allowed, loading.rule) == (False, "credential header loading")
    assert "retry" in loading.message


def test_reply_values_are_quoted_for_squid() -> None:
    assert quote('a "b" \\c\nd') == '"a \\"b\\" \\\\c d"'


def test_the_policy_document_keeps_values_apart_and_is_checked() -> None:
    fetched = read_document({
        "allow": [{"host": "api.example.com", "ports": [443]}],
        "credentials": [{"host": "API.example.com", "header": "X-Api-Key", "secret": "k", "value": "v1"}],
    })  # fmt: skip
    assert fetched.values == {"api.example.com": "v1"} and "v1" not in repr(fetched)
    assert fetched.policy.credential_for("api.example.com") is not None
    assert read_document({"allow": [], "credentials": []}).policy.off
    with pytest.raises(PolicyError, match="value"):
        read_document({"allow": [{"host": "a.example", "ports": [1]}],
                       "credentials": [{"host": "a.example", "header": "h", "secret": "k"}]})  # fmt: skip
    with pytest.raises(PolicyError, match="allow"):
        read_document({"allow": [{"host": "a.example", "ports": [0]}]})


def line(**fields: str) -> str:
    values = {"time": "1.0", "client": "10.88.0.2", "actor": "demo%2Fa", "status": "TCP_MISS", "code": "200",
              "method": "GET", "host": "api.example.com", "port": "443", "sni": "-", "bump": "-", "sent": "80",
              "received": "500", "error": "-", "rule": "allow%5B0%5D"} | fields  # fmt: skip
    return " ".join(values[name] for name, _ in ACCESS_FIELDS)


def test_access_log_lines_are_sorted_into_allowed_denied_and_bookkeeping() -> None:
    entry = parse_line(line())
    assert entry is not None and (entry.actor, entry.destination, entry.sent, entry.received) == (
        "demo/a", "api.example.com:443", 80, 500)  # fmt: skip
    assert classify(entry) == ("allowed", "allow[0]")
    assert classify(parse_line(line(status="TCP_DENIED", code="403", rule="no%20rule")))  == ("denied", "no rule")  # type: ignore[arg-type]
    protected = parse_line(line(status="TCP_DENIED", error="ERR_ATE_PROTECTED"))
    assert protected is not None and classify(protected) == ("denied", "protected address")
    terminated = parse_line(line(status="NONE_NONE", code="000", method="CONNECT", host="10.1.1.1", sni="x.example",
                                 bump="terminate"))  # fmt: skip
    assert terminated is not None and classify(terminated)[0] == "denied" and terminated.destination == "x.example:443"
    conflict = parse_line(line(status="NONE_NONE", code="409", error="ERR_CONFLICT_HOST", actor="-"))
    assert conflict is not None and classify(conflict) == ("denied", "host conflict")
    for bookkeeping in (line(status="NONE_NONE", method="CONNECT", bump="bump"), line(status="NONE_NONE", code="000")):
        assert classify(parse_line(bookkeeping)) == ("skipped", "")  # type: ignore[arg-type]
    assert parse_line("not a line") is None


def test_header_slots_only_grow_and_persist_names(tmp_path: Path) -> None:
    slots = HeaderSlots(tmp_path / "names.json")
    assert slots.add(["X-Api-Key", "authorization"]) and not slots.add(["x-api-key"])
    assert slots.add(["x-other"])
    assert HeaderSlots(tmp_path / "names.json").slots() == {"x-api-key": 0, "authorization": 1, "x-other": 2}
    assert slots.slots(2) == {"x-api-key": 0, "authorization": 1}


def test_the_helper_relay_denies_by_itself_when_the_atelet_is_away(tmp_path: Path) -> None:
    out = io.StringIO()
    helper(str(tmp_path / "none.sock"), "0", io.StringIO("7 10.88.0.2 - - a.example 443 - CONNECT\n"), out)
    assert out.getvalue() == f"7 {UNREACHABLE}\n"


def test_an_actor_cannot_grow_the_egress_metrics_without_bound() -> None:
    from atelet import metrics

    actor = "demo/many-names"
    labels = [metrics.egress_destination(actor, f"h{i}.example:443") for i in range(metrics.MAX_DESTINATIONS_PER_ACTOR + 5)]
    assert labels[: metrics.MAX_DESTINATIONS_PER_ACTOR] == [f"h{i}.example:443" for i in range(100)]
    assert set(labels[100:]) == {"other"}
    assert metrics.egress_destination(actor, "h7.example:443") == "h7.example:443"  # one it already has
    assert metrics.egress_destination("demo/another", "h200.example:443") == "h200.example:443"  # per actor
    assert metrics.egress_rule("no rule allows h1.example port 443") == "no rule allows"
    assert metrics.egress_rule("protected address") == "protected address"
