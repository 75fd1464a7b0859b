"""The whole stack, started the way a user starts it: `ate dev` in a subprocess."""

from __future__ import annotations

import contextlib
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
PORTS = {"api": 28080, "router": 28000, "atelet": 28085, "temporal": 27233, "ui": 28233, "metrics": 29000}
"""Ports apart from the defaults, so the suite runs beside a developer's own `ate dev`."""


@dataclass
class Stack:
    """A running `ate dev`: where to reach it, and a CLI runner (with the ate config `ate dev`
    wrote, so the CLI carries the admin token `ate dev` made)."""

    data_dir: Path
    failpoints: Path
    config: Path
    api: str = f"http://127.0.0.1:{PORTS['api']}"
    router: str = f"http://127.0.0.1:{PORTS['router']}"
    temporal_ui: str = f"http://127.0.0.1:{PORTS['ui']}"
    metrics_base: int = PORTS["metrics"]

    @property
    def token(self) -> str:
        """The admin token `ate dev` made for the local user."""
        return (self.data_dir / "credentials" / "local-admin.token").read_text().strip()

    @property
    def headers(self) -> dict[str, str]:
        """Request headers acting as that admin."""
        return {"Authorization": f"Bearer {self.token}"}

    def ate(self, *args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run the `ate` CLI against this stack (with `stdin` as its standard input)."""
        done = subprocess.run(
            [ATE, "--server", self.api, *args],
            cwd=REPO,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, "ATE_CONFIG": str(self.config)},
        )
        if check and done.returncode != 0:
            raise AssertionError(f"ate {' '.join(args)} failed ({done.returncode}): {done.stderr}{done.stdout}")
        return done


@contextlib.contextmanager
def running_stack(
    base: Path, ports: dict[str, int], node: str, subnet: str, extra: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> Iterator[Stack]:
    """`ate dev` in `base` on `ports`; stopped (SIGTERM, as Ctrl-C) at the end."""
    data_dir = base / "data"
    failpoints = base / "failpoints"
    failpoints.mkdir()
    config = base / "ate-config.yaml"
    log = base / "ate-dev.out"
    out = log.open("w")
    argv = [
            ATE, "dev", "--data-dir", str(data_dir),
            "--api-port", str(ports["api"]), "--router-port", str(ports["router"]),
            "--atelet-port", str(ports["atelet"]), "--temporal-port", str(ports["temporal"]),
            "--ui-port", str(ports["ui"]), "--metrics-port-base", str(ports["metrics"]),
            "--node", node, "--subnet", subnet, *extra,
    ]  # fmt: skip
    process = subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "ATE_FAILPOINTS_DIR": str(failpoints),
            "ATE_CONFIG": str(config),
            **(env or {}),
        },
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
        yield Stack(
            data_dir=data_dir,
            failpoints=failpoints,
            config=config,
            api=f"http://127.0.0.1:{ports['api']}",
            router=f"http://127.0.0.1:{ports['router']}",
            temporal_ui=f"http://127.0.0.1:{ports['ui']}",
            metrics_base=ports["metrics"],
        )
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        out.close()


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`ate dev` with a fresh data dir; stopped (and checked to leave nothing) at the end."""
    with running_stack(Path(tmp_path_factory.mktemp("ate-dev")), PORTS, "e2e", "10.89.0.0/16") as running:
        yield running
