"""What a crashed atelet leaves, and the commands `ate dev` prints for it."""

from pathlib import Path

from ate.dev.leftovers import find_leftovers, netns_prefix, report_leftovers, veth_prefix


def test_leftovers_of_this_node_only(tmp_path: Path) -> None:
    (tmp_path / "runsc").mkdir()
    # sha256("vm-3d71") starts 998c: this node's host veths are atv998c<i>.
    assert veth_prefix("vm-3d71") == "atv998c"
    outputs = {
        ("runsc", f"--root={tmp_path / 'runsc'}", "list", "-quiet"): "demo-c1-7\n",
        ("ip", "netns", "list"): (
            "ate-vm-3d71-default-1 (id: 4)\nate-vm-3d71-default-0 (id: 3)\nate-vm-449d-default-0 (id: 2)\nother\n"
        ),
        ("ip", "-o", "link", "show"): (
            "1: lo: <LOOPBACK,UP> mtu 65536\n"
            "7: atv998c0@if6: <BROADCAST,MULTICAST,UP> mtu 1500\n"
            "9: atv12340@if8: <BROADCAST,MULTICAST,UP> mtu 1500\n"
        ),
        ("iptables", "-S"): (
            "-P INPUT ACCEPT\n-P FORWARD ACCEPT\n-P OUTPUT ACCEPT\n-N ATE-ISOLATE-1234\n-N ATE-ISOLATE-998c\n"
            "-A INPUT -i atv12340+ -j ATE-ISOLATE-1234\n-A INPUT -i atv998c+ -j ATE-ISOLATE-998c\n"
            "-A FORWARD -i atv998c+ -j ATE-ISOLATE-998c\n"
            "-A ATE-ISOLATE-998c -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN\n-A ATE-ISOLATE-998c -j DROP\n"
        ),
        ("ip6tables", "-S"): "-P INPUT ACCEPT\n-N ATE-ISOLATE-998c\n-A INPUT -i atv998c+ -j ATE-ISOLATE-998c\n",
    }
    found = find_leftovers("vm-3d71", tmp_path, run=lambda argv: outputs.get(tuple(argv)))
    assert found.commands() == [
        f"runsc --root={tmp_path / 'runsc'} delete --force demo-c1-7",
        "ip netns delete ate-vm-3d71-default-1",
        "ip netns delete ate-vm-3d71-default-0",
        "ip link delete atv998c0",
        "iptables -D INPUT -i atv998c+ -j ATE-ISOLATE-998c",
        "iptables -D FORWARD -i atv998c+ -j ATE-ISOLATE-998c",
        "ip6tables -D INPUT -i atv998c+ -j ATE-ISOLATE-998c",
        "iptables -F ATE-ISOLATE-998c && iptables -X ATE-ISOLATE-998c",
        "ip6tables -F ATE-ISOLATE-998c && ip6tables -X ATE-ISOLATE-998c",
    ]


def test_nothing_found_when_the_tools_are_missing(tmp_path: Path) -> None:
    found = find_leftovers("vm", tmp_path, run=lambda _argv: None)
    assert not found and found.commands() == []
    assert netns_prefix("my host") == "ate-my-host-"


def test_the_report_says_the_next_start_adopts_what_still_runs(tmp_path: Path) -> None:
    # A restarted atelet adopts the sandboxes that still run (and finishes a checkpoint one was
    # in): the report must not present them as garbage (the chaos run of 2026-12-02 was told to
    # delete a sandbox the next start then adopted, in the middle of its checkpoint).
    (tmp_path / "runsc").mkdir()
    outputs = {("runsc", f"--root={tmp_path / 'runsc'}", "list", "-quiet"): "default-0-7\n"}
    lines: list[str] = []
    report_leftovers("vm-3d71", tmp_path, lines.append, run=lambda argv: outputs.get(tuple(argv)))
    assert lines == [
        "ate: the atelet was not running, so its sandboxes and network namespaces are left over: the next 'ate dev' "
        "adopts the sandboxes that still run (their actors keep their memory) and removes the rest; to remove them "
        "all now instead (running actors then lose their memory), run as root:",
        f"  runsc --root={tmp_path / 'runsc'} delete --force default-0-7",
    ]
