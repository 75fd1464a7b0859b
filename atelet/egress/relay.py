"""Squid's helper and log daemon: relays between Squid's pipes and the atelet's decision socket.

Squid runs this program (as its own user, ``proxy``) in two roles, copied by the atelet into the
egress run dir as a script (``script``), for the standard library alone (``python3 -I -S``):

- ``relay acl <socket> <slots>``: an ``external_acl_type`` helper with concurrency. It connects
  to the atelet's unix socket, says ``acl <slots>`` (how many credential header slots the Squid
  configuration it serves has), then copies Squid's lookup lines to the socket and the atelet's
  answer lines back, each prefixed with its channel ID. When the atelet cannot be reached it
  answers every lookup itself with a denial (Squid stops when its helpers keep dying, so this
  never exits but on end of input), and tries again at most once a second.
- ``relay <socket>``: a ``logfile_daemon``. It says ``log`` and sends the access log lines (the
  ``L`` commands of Squid's log daemon protocol); other commands (rotate, flush...) mean nothing
  here. Lines are dropped while the atelet cannot be reached.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

UNREACHABLE = 'ERR ate_denied=1 ate_rule="decision point unavailable" message="the node\'s egress decision point is not answering"'
"""The answer to a lookup when the atelet cannot be reached."""
RETRY_SECONDS = 1.0


class Link:
    """The connection to the atelet's socket, made (again) on demand."""

    def __init__(self, path: str, hello: str) -> None:
        self.path = path
        self.hello = hello
        self.sock: socket.socket | None = None
        self.tried = 0.0
        self.lock = threading.Lock()

    def connect(self) -> socket.socket | None:
        """The connected socket, or None (and no new try for RETRY_SECONDS after a failure)."""
        with self.lock:
            if self.sock is not None:
                return self.sock
            if time.monotonic() - self.tried < RETRY_SECONDS:
                return None
            self.tried = time.monotonic()
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.path)
                sock.sendall(self.hello.encode() + b"\n")
            except OSError:
                sock.close()
                return None
            self.sock = sock
            return sock

    def drop(self, sock: socket.socket) -> None:
        """Forgets ``sock`` (after a failure on it)."""
        with self.lock:
            if self.sock is sock:
                self.sock = None
        try:
            sock.close()
        except OSError:
            pass

    def send(self, line: str) -> bool:
        """Sends one line; False when the atelet cannot be reached."""
        sock = self.connect()
        if sock is None:
            return False
        try:
            sock.sendall(line.encode())
        except OSError:
            self.drop(sock)
            return False
        return True


class Answers:
    """Squid's side: writes answer lines, and remembers the lookups sent and not answered yet."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.pending: set[str] = set()

    def sent(self, channel: str) -> None:
        """``channel``'s lookup went to the atelet."""
        with self.lock:
            self.pending.add(channel)

    def write(self, line: str) -> None:
        """Passes one answer line (``<channel> <answer>``) to Squid."""
        with self.lock:
            self.pending.discard(line.split(" ", 1)[0])
            self.out.write(line if line.endswith("\n") else line + "\n")
            self.out.flush()

    def unanswered(self) -> None:
        """Answers every pending lookup with a denial (the connection to the atelet broke)."""
        with self.lock:
            channels, self.pending = sorted(self.pending), set()
        for channel in channels:
            self.write(f"{channel} {UNREACHABLE}")


def _copy_answers(link: Link, answers: Answers) -> None:
    """Copies the atelet's answer lines to Squid for as long as the process lives."""
    while True:
        sock = link.connect()
        if sock is None:
            time.sleep(RETRY_SECONDS)
            continue
        with sock.makefile("r", encoding="utf-8", errors="replace", newline="\n") as lines:
            try:
                for line in lines:
                    answers.write(line)
            except OSError:
                pass
        link.drop(sock)
        answers.unanswered()


def helper(path: str, slots: str, lines: TextIO, out: TextIO) -> None:
    """The ``external_acl_type`` role (module doc)."""
    link = Link(path, f"acl {slots}")
    answers = Answers(out)
    threading.Thread(target=_copy_answers, args=(link, answers), daemon=True).start()
    for line in lines:
        if not line.strip():
            continue
        channel = line.split(" ", 1)[0]
        answers.sent(channel)
        if not link.send(line if line.endswith("\n") else line + "\n"):
            answers.write(f"{channel} {UNREACHABLE}")


def log_daemon(path: str, lines: TextIO) -> None:
    """The ``logfile_daemon`` role (module doc)."""
    link = Link(path, "log")
    for line in lines:
        if line.startswith("L"):
            link.send(line[1:] if line.endswith("\n") else line[1:] + "\n")


def main(argv: list[str]) -> int:
    """``relay acl <socket> <slots>`` or ``relay <socket>``; returns the exit status."""
    if len(argv) == 4 and argv[1] == "acl":
        helper(argv[2], argv[3], sys.stdin, sys.stdout)
    elif len(argv) == 2:
        log_daemon(argv[1], sys.stdin)
    else:
        sys.stderr.write("usage: relay acl <socket> <slots> | relay <socket>\n")
        return 2
    return 0


def script(interpreter: str) -> str:
    """This module as a script run by ``interpreter`` with only the standard library."""
    return f"#!{interpreter} -IS\n" + Path(__file__).read_text()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
