"""Which sandboxes have outbound traffic in flight (``atelet.egress.in_flight``): lines written by
hand in ``ss``'s format, and real sockets of this kernel."""

from __future__ import annotations

import socket

import pytest

from atelet.egress.in_flight import cut, open_peers, peers_in_flight, sockets, ss_arguments


def test_the_peers_of_hand_written_lines() -> None:
    text = "\n".join([
        "0      0      10.88.0.1:8087 10.88.0.2:40000",
        "0      0      10.88.0.5:8089 10.88.0.6:40001",
        "0      0      [::ffff:127.0.0.1]:8087 [::ffff:127.0.0.1]:40002",  # not a worker's (IPv6)
        "garbage", "",
    ])  # fmt: skip
    assert open_peers(text) == {"10.88.0.2", "10.88.0.6"}


def test_the_command_lists_established_sockets_on_the_ports() -> None:
    assert ss_arguments([8089, 8087, 8087]) == ["ss", "-tnHO", "state", "established",
                                                "( sport = :8087 or sport = :8089 )"]  # fmt: skip


@pytest.mark.asyncio
async def test_a_connection_counts_while_it_is_open() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    other = socket.create_server(("127.0.0.1", 0))  # a connection to another port does not count
    elsewhere = socket.create_connection(other.getsockname())
    try:
        assert await peers_in_flight([port]) == set()
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert await peers_in_flight([port]) == {"127.0.0.1"}
        client.close()
        accepted.close()
        assert await peers_in_flight([port]) == set()
    finally:
        for s in (elsewhere, other, server):
            s.close()


@pytest.mark.runsc  # ss -K needs root (CAP_NET_ADMIN)
@pytest.mark.asyncio
async def test_a_cut_resets_each_connection_and_counts_them() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    accepted = [server.accept()[0] for _ in clients]
    try:
        assert await cut([port], "127.0.0.1") == 3  # three sockets of one peer address
        assert await peers_in_flight([port]) == set()
        for client in clients:
            client.settimeout(2)
            with pytest.raises(ConnectionResetError):
                client.recv(1)
        assert await cut([port], "127.0.0.1") == 0
    finally:
        for s in (*clients, *accepted, server):
            s.close()


def test_sockets_are_counted_per_line() -> None:
    assert sockets("0 0 10.88.0.1:8087 10.88.0.2:1\n0 0 10.88.0.1:8087 10.88.0.2:2\n\n") == 2
