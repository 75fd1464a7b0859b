"""Egress policies (issue 28, domain.egress): how a rule matches a destination, what is never
reached, how an actor's policy narrows its template's, and every malformed policy refused naming
the field. The expected values are worked out by hand from the rules in the module doc."""

from __future__ import annotations

from typing import Any

import pytest

from domain.egress import EgressPolicy, parse_egress_policy, protected_reason
from domain.idle import PolicyError

ISSUE_EXAMPLE = {
    "allow": [
        {"host": "api.example.com", "ports": [443]},
        {"host": "*.pypi.example", "ports": [443]},
        {"cidr": "10.20.0.0/16", "ports": [5432]},
    ],
    "credentials": [{"host": "api.example.com", "header": "x-api-key", "secret": "model-key"}],
}


def test_the_issues_example_allows_what_it_lists_and_nothing_else() -> None:
    policy = parse_egress_policy(ISSUE_EXAMPLE)
    allowed = [
        ("api.example.com", 443, "allow[0] (host api.example.com ports 443)"),
        ("API.Example.COM.", 443, "allow[0] (host api.example.com ports 443)"),  # case and a trailing dot
        ("files.pypi.example", 443, "allow[1] (host *.pypi.example ports 443)"),
        ("a.b.pypi.example", 443, "allow[1] (host *.pypi.example ports 443)"),  # any depth below
        ("10.20.3.4", 5432, "allow[2] (cidr 10.20.0.0/16 ports 5432)"),
    ]
    for destination, port, rule in allowed:
        assert policy.decide(destination, port).allowed, destination
        assert policy.decide(destination, port).rule == rule
    refused = [
        ("api.example.com", 80),  # another port
        ("evil-api.example.com", 443),
        ("api.example.com.evil.test", 443),
        ("pypi.example", 443),  # the wildcard's apex is not below it
        ("xpypi.example", 443),  # not a label boundary
        ("10.21.0.1", 5432),
        ("10.20.3.4", 443),
        ("93.184.216.34", 443),  # a raw IP never matches a host rule
    ]
    for destination, port in refused:
        decision = policy.decide(destination, port)
        assert not decision.allowed and decision.rule == f"no rule allows {destination} port {port}", destination
    assert EgressPolicy().decide("api.example.com", 443).rule == "the actor has no egress policy"
    credential = policy.credential_for("API.example.com")
    assert credential is not None and (credential.header, credential.secret) == ("x-api-key", "model-key")
    assert policy.credential_for("files.pypi.example") is None


def test_ipv6_networks_match_ipv6_destinations_only() -> None:
    policy = parse_egress_policy({"allow": [{"cidr": "2001:db8::/32", "ports": [443]}]})
    assert policy.decide("2001:db8::5", 443).allowed and policy.decide("[2001:db8::5]", 443).allowed
    assert not policy.decide("2001:db9::5", 443).allowed and not policy.decide("10.0.0.1", 443).allowed


def test_loopback_link_local_metadata_and_the_nodes_networks_are_never_reached() -> None:
    import ipaddress

    node = [ipaddress.ip_network("10.89.0.0/16"), ipaddress.ip_network("192.0.2.10/32")]
    for address in ("127.0.0.1", "::1", "169.254.169.254", "fe80::1", "0.0.0.0", "224.0.0.1", "100.100.100.200",
                    "fd00:ec2::254"):  # fmt: skip
        reason = protected_reason(address, node)
        assert reason is not None and "never reached" in reason, address
    assert protected_reason("10.89.0.6", node) == (
        "10.89.0.6 is in 10.89.0.0/16, an address of the node, the control plane or the workers"
    )
    assert protected_reason("192.0.2.10", node) is not None
    assert protected_reason("192.0.2.11", node) is None and protected_reason("10.20.3.4", node) is None
    listed = [ipaddress.ip_network("10.89.7.0/24")]  # an operator's explicit exception
    assert protected_reason("10.89.7.1", node, listed) is None and protected_reason("10.89.8.1", node, listed)
    assert protected_reason("api.example.com") == "'api.example.com' is not an IP address"


def test_an_actors_policy_must_stay_within_its_templates() -> None:
    template = parse_egress_policy(ISSUE_EXAMPLE)
    narrower = parse_egress_policy({
        "allow": [{"host": "files.pypi.example", "ports": [443]}, {"cidr": "10.20.5.0/24", "ports": [5432]},
                  {"host": "*.mirror.pypi.example", "ports": [443]},
                  {"host": "api.example.com", "ports": [443]}],
        "credentials": [{"host": "api.example.com", "header": "x-api-key", "secret": "model-key"}],
    })  # fmt: skip
    assert template.narrowed(narrower) is narrower
    wider = [
        ({"allow": [{"host": "other.example", "ports": [443]}]}, "egress.allow[0]: host other.example ports 443"),
        ({"allow": [{"host": "api.example.com", "ports": [443, 80]}]}, "egress.allow[0]: host api.example.com"),
        ({"allow": [{"cidr": "10.0.0.0/8", "ports": [5432]}]}, "egress.allow[0]: cidr 10.0.0.0/8 ports 5432"),
        ({"allow": [{"host": "*.api.example.com", "ports": [443]}]}, "egress.allow[0]: host *.api.example.com"),
        ({"allow": [{"host": "api.example.com", "ports": [443]}],
          "credentials": [{"host": "api.example.com", "header": "x-api-key", "secret": "other"}]},
         "egress.credentials[0]: api.example.com is not a credential of the template's egress"),
    ]  # fmt: skip
    for actor, words in wider:
        with pytest.raises(PolicyError) as refused:
            template.narrowed(parse_egress_policy(actor))
        assert str(refused.value).startswith(words), str(refused.value)


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ([], "egress: must be a mapping with allow and credentials"),
        ({"allow": [], "deny": []}, "egress.deny: unknown field (allowed: allow, credentials)"),
        ({"allow": {"host": "a.example"}}, "egress.allow: must be a list"),
        ({"allow": [{"host": "a.example"}]}, "egress.allow[0].ports: give the ports this rule allows, e.g. [443]"),
        ({"allow": [{"host": "a.example", "ports": [0]}]}, "egress.allow[0].ports[0]: 0 is not a port (1-65535)"),
        ({"allow": [{"host": "a.example", "ports": [65536]}]}, "egress.allow[0].ports[0]: 65536 is not a port"),
        ({"allow": [{"host": "a.example", "ports": [True]}]}, "egress.allow[0].ports[0]: True is not a port"),
        ({"allow": [{"host": "a.example", "ports": []}]}, "egress.allow[0].ports: must be a non-empty list"),
        ({"allow": [{"ports": [443]}]}, "egress.allow[0]: give exactly one of host and cidr"),
        ({"allow": [{"host": "a.example", "cidr": "10.0.0.0/8", "ports": [443]}]}, "egress.allow[0]: give exactly one"),
        ({"allow": [{"host": "a.example", "port": 443}]}, "egress.allow[0].port: unknown field (allowed: host, cidr, ports)"),
        ({"allow": [{"host": "a_b.example", "ports": [443]}]}, "egress.allow[0].host: 'a_b.example' is not a DNS name"),
        ({"allow": [{"host": "api.*.example", "ports": [443]}]}, "egress.allow[0].host: 'api.*.example' is not a DNS name"),
        ({"allow": [{"host": "*.com", "ports": [443]}]}, "egress.allow[0].host: '*.com': a wildcard needs a domain"),
        ({"allow": [{"host": "*", "ports": [443]}]}, "egress.allow[0].host: '*': a wildcard needs a domain"),
        ({"allow": [{"host": "10.0.0.1", "ports": [443]}]}, "egress.allow[0].host: '10.0.0.1' is not a DNS name"),
        ({"allow": [{"cidr": "10.0.0.1/8", "ports": [443]}]}, "egress.allow[0].cidr: '10.0.0.1/8' is not a network"),
        ({"allow": [{"cidr": "10.0.0.0/33", "ports": [443]}]}, "egress.allow[0].cidr: '10.0.0.0/33' is not a network"),
        ({"allow": [{"cidr": 10, "ports": [443]}]}, "egress.allow[0].cidr: must be a network such as 10.20.0.0/16"),
        ({"credentials": [{"host": "a.example", "header": "x-k"}]}, "egress.credentials[0].secret: is required"),
        ({"allow": [{"host": "*.example.com", "ports": [443]}],
          "credentials": [{"host": "*.example.com", "header": "x-k", "secret": "k"}]},
         "egress.credentials[0].host: '*.example.com' is not a DNS name such as api.example.com (a network"),
        ({"credentials": [{"host": "a.example", "header": "x-k", "secret": "k"}]},
         "egress.credentials[0].host: a.example is not allowed by any allow rule"),
        ({"allow": [{"host": "a.example", "ports": [443]}],
          "credentials": [{"host": "a.example", "header": "x k", "secret": "k"}]},
         "egress.credentials[0].header: 'x k' is not an HTTP header name"),
        ({"allow": [{"host": "a.example", "ports": [443]}],
          "credentials": [{"host": "a.example", "header": "Host", "secret": "k"}]},
         "egress.credentials[0].header: Host frames or routes the request and cannot be set"),
        ({"allow": [{"host": "a.example", "ports": [443]}],
          "credentials": [{"host": "a.example", "header": "x-k", "secret": "Model_Key"}]},
         "egress.credentials[0].secret: 'Model_Key' is not a valid secret name"),
        ({"allow": [{"host": f"h{i}.example", "ports": [443]} for i in range(65)]}, "egress.allow: has 65 entries"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(policy: Any, message: str) -> None:
    with pytest.raises(PolicyError) as refused:
        parse_egress_policy(policy)
    assert str(refused.value).startswith(message), str(refused.value)


def test_no_egress_is_none() -> None:
    assert parse_egress_policy(None) == EgressPolicy() and parse_egress_policy({}) == EgressPolicy()
