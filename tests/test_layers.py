"""The layers of docs/architecture.md hold: import-linter's contracts (pyproject.toml,
`[tool.importlinter]`) pass on the tree, and they do catch an import that breaks a layer."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")
PACKAGES = ("domain", "workflows", "temporal_worker", "activities", "api", "atelet", "router", "controller", "ate", "bench", "serving")


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT), "--no-cache"], cwd=root, capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
    )  # fmt: skip


def test_every_layer_contract_is_kept() -> None:
    done = lint(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_a_workflow_that_reaches_for_the_store_breaks_a_contract(tmp_path: Path) -> None:
    for package in PACKAGES:
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    steps = tmp_path / "workflows" / "steps.py"
    steps.write_text(steps.read_text() + "\nfrom activities.store import Store  # noqa\n")
    pure = tmp_path / "domain" / "refs.py"
    pure.write_text(pure.read_text() + "\nimport pydantic  # noqa\n")
    done = lint(tmp_path)
    assert done.returncode == 1
    assert "workflows import only domain and temporalio (no I/O) BROKEN" in done.stdout
    assert "workflows.steps -> activities.store" in done.stdout
    assert "domain is pure: the standard library only BROKEN" in done.stdout
    assert "Contracts: 6 kept, 2 broken." in done.stdout
