"""The Temporal helper: the dev server starts with ate's search attributes and stops cleanly."""

import socket
import subprocess
from pathlib import Path

import psutil

from ate.dev.temporal import SEARCH_ATTRIBUTES, dev_server_argv, dev_server_child, port_open, temporal_binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_argv_has_the_tuning_flags(tmp_path: Path) -> None:
    argv = dev_server_argv("temporal", db_filename=tmp_path / "t.db")
    text = " ".join(argv)
    for flag in (
        "--ip 127.0.0.1", "--port 7233", "--ui-port 8233", f"--db-filename {tmp_path / 't.db'}",
        "--ui-disable-news-fetch", "--log-level warn",
        "--sqlite-pragma journal_mode=wal", "--sqlite-pragma synchronous=normal",
        "--dynamic-config-value history.transferProcessorMaxPollRPS=1000",
        "--dynamic-config-value history.timerProcessorMaxPollRPS=1000",
        "--dynamic-config-value history.visibilityProcessorMaxPollRPS=1000",
        "--search-attribute AteAtespace=Keyword", "--search-attribute AteActor=Keyword",
        "--search-attribute AteOperation=Keyword",
    ):  # fmt: skip
        assert flag in text


def test_dev_server_starts_with_search_attributes_and_stops(tmp_path: Path) -> None:
    port, ui_port = free_port(), free_port()
    child = dev_server_child(tmp_path, tmp_path / "logs" / "temporal.log", port=port, ui_port=ui_port)
    child.start()
    try:
        child.wait_ready(30)
        listed = subprocess.run(
            [temporal_binary(), "operator", "search-attribute", "list", "--address", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
        for name in SEARCH_ATTRIBUTES:
            assert name in listed
        assert (tmp_path / "temporal.db").exists()
        pid = child.pid
        assert pid is not None
    finally:
        child.stop(timeout=15)
    assert not child.running()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not port_open("127.0.0.1", port)
    assert not port_open("127.0.0.1", ui_port)
