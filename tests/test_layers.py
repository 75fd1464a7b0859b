"""The layers of docs/architecture.md hold: import-linter's contracts (pyproject.toml,
`[tool.importlinter]`) pass on the tree, and they do catch an import that breaks a layer."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")
PACKAGES = ("domain", "store", "workflows", "temporal_worker", "activities", "api", "atelet", "router", "controller", "ate", "bench", "serving")


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT), "--no-cache"], cwd=root, capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
    )  # fmt: skip


def test_every_layer_contract_is_kept() -> None:
    done = lint(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_imports_across_a_layer_break_its_contract(tmp_path: Path) -> None:
    for package in PACKAGES:
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    steps = tmp_path / "workflows" / "steps.py"
    steps.write_text(steps.read_text() + "\nfrom store import Store  # noqa\n")
    pure = tmp_path / "domain" / "refs.py"
    pure.write_text(pure.read_text() + "\nimport pydantic  # noqa\n")
    data = tmp_path / "store" / "sql.py"
    data.write_text(data.read_text() + "\nimport activities.db  # noqa\n")
    router = tmp_path / "router" / "core" / "upstream.py"
    router.write_text(router.read_text() + "\nimport store.listen  # noqa\nimport store.actors  # noqa\n")
    peer = tmp_path / "router" / "nginx" / "drain.py"
    peer.write_text(peer.read_text() + "\nimport router.python.app  # noqa\n")
    core = tmp_path / "router" / "core" / "routing.py"
    core.write_text(core.read_text() + "\nimport router.nginx.admin  # noqa\n")
    api = tmp_path / "api" / "deps.py"
    api.write_text(api.read_text() + "\nimport asyncpg  # noqa\n")
    done = lint(tmp_path)
    assert done.returncode == 1
    assert "workflows import only domain and temporalio (no I/O) BROKEN" in done.stdout
    assert "workflows.steps -> store" in done.stdout
    assert "domain is pure: the standard library only BROKEN" in done.stdout
    assert "it imports domain only BROKEN" in done.stdout
    assert "store.sql -> activities.db" in done.stdout
    assert "the atelet, the router and the CLI import no control-plane package BROKEN" in done.stdout
    assert "router.core.upstream -> store.actors" in done.stdout
    assert "router.core.upstream -> store.listen" not in done.stdout  # the one helper the router may use
    # the api-server and the controller reach activities.db through the store: broken too
    assert "the api-server and the controller use domain and the store only BROKEN" in done.stdout
    assert "router.python and router.nginx are peers BROKEN" in done.stdout
    assert "router.nginx.drain -> router.python.app" in done.stdout
    assert "router.core imports no data path BROKEN" in done.stdout
    assert "router.core.routing -> router.nginx.admin" in done.stdout
    assert "only the store talks to PostgreSQL (asyncpg)" in done.stdout
    assert "api.deps -> asyncpg" in done.stdout
    assert "Contracts: 4 kept, 8 broken." in done.stdout, done.stdout
