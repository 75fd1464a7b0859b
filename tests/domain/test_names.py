"""Names and addresses as nodes register them (domain.names)."""

from __future__ import annotations

import pytest

from domain.names import check_host_port, check_ip, check_node_name, check_worker_name


@pytest.mark.parametrize("value", ["node-1", "Host-7.example", "0", "worker-pod-x7f2.ate.svc", "a" * 63])
def test_node_names_are_host_names(value: str) -> None:
    assert check_node_name(value) == value


@pytest.mark.parametrize("value", ["", "-a", "a-", "a..b", "a_b", "a/b", "../x", "a" * 64, "x\x00"])
def test_other_node_names_are_refused(value: str) -> None:
    with pytest.raises(ValueError, match="is not a valid node name"):
        check_node_name(value)


@pytest.mark.parametrize("value", ["default-0", "big.pool-12"])
def test_worker_names_are_subdomains(value: str) -> None:
    assert check_worker_name(value) == value


@pytest.mark.parametrize("value", ["", "Default-0", "../w", "w_0"])
def test_other_worker_names_are_refused(value: str) -> None:
    with pytest.raises(ValueError, match="is not a valid worker name"):
        check_worker_name(value)


@pytest.mark.parametrize("value", ["10.0.0.5:8085", "[fd00::5]:8085", "fd00::5:8085", "node-1.example:1", "h:65535"])
def test_host_port(value: str) -> None:
    assert check_host_port(value) == value


@pytest.mark.parametrize("value", ["", "10.0.0.5", "10.0.0.5:0", "h:65536", "h:\uff18\uff10", "../x:1", "a b:1", ":80"])
def test_other_addresses_are_refused(value: str) -> None:
    with pytest.raises(ValueError, match="is not host:port"):
        check_host_port(value)


def test_ip_addresses() -> None:
    assert check_ip("10.88.0.2") == "10.88.0.2"
    assert check_ip("fd00::2") == "fd00::2"
    for value in ("", "10.0.0.300", "host", "10.0.0.1/24"):
        with pytest.raises(ValueError, match="is not an IP address"):
            check_ip(value)
