"""Fixtures of the microvm tests: the guest kernel (scripts/guest-kernel.sh, once per machine),
and the atelet tests' short temp dir and counter image."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.atelet.conftest import counter_image, short_tmp

__all__ = ["counter_image", "kernel_dir", "short_tmp"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def kernel_dir() -> Path:
    """The unpacked guest kernel's dir (``vmlinuz``, ``lib/modules/<version>``)."""
    out = subprocess.run(["bash", str(ROOT / "scripts/guest-kernel.sh")], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1])
