"""The whole stack, started the way a user starts it: `ate dev` in a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ATE = str(Path(sys.executable).parent / "ate")


@dataclass
class Stack:
    """A running `ate dev`: where to reach it, and a CLI runner."""

    data_dir: Path
    api: str = "http://127.0.0.1:8080"
    router: str = "http://127.0.0.1:8000"
    temporal_ui: str = "http://127.0.0.1:8233"

    def ate(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the `ate` CLI against this stack."""
        done = subprocess.run([ATE, *args], cwd=REPO, capture_output=True, text=True, timeout=180)
        if check and done.returncode != 0:
            raise AssertionError(f"ate {' '.join(args)} failed ({done.returncode}): {done.stderr}{done.stdout}")
        return done


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`ate dev` with a fresh data dir; stopped (and checked to leave nothing) at the end."""
    data_dir = Path(tmp_path_factory.mktemp("ate-dev")) / "data"
    log = data_dir.parent / "ate-dev.out"
    out = log.open("w")
    process = subprocess.Popen(
        [ATE, "dev", "--data-dir", str(data_dir)], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 180
    try:
        while True:
            text = log.read_text()
            if "ate: ready" in text:
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ate dev did not become ready:\n{text[-4000:]}")
            time.sleep(0.2)
        yield Stack(data_dir=data_dir)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        out.close()
