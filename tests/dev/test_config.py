"""`ate dev` defaults that must differ between two stacks on one machine."""

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ate.cli.main import app
from ate.dev import config as config_module
from ate.dev.config import DevConfig
from ate.dev.parts import atelet
from ate.dev.stack import DevStack


@pytest.fixture(autouse=True)
def hostname(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_module.socket, "gethostname", lambda: "box")


def test_node_and_subnet_default_from_the_data_dir() -> None:
    # sha256("/srv/ate-a") starts 3d71 (0x3d71 = 15729, mod 100 = 29);
    # sha256("/srv/ate-b") starts 449d (0x449d = 17565, mod 100 = 65).
    a = DevStack(DevConfig(data_dir=Path("/srv/ate-a")), out=lambda _line: None).config
    b = DevStack(DevConfig(data_dir=Path("/srv/ate-b")), out=lambda _line: None).config
    assert (a.node, a.subnet) == ("box-3d71", "10.117.0.0/16")
    assert (b.node, b.subnet) == ("box-449d", "10.153.0.0/16")


def test_a_relative_data_dir_counts_as_its_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = DevStack(DevConfig(data_dir=Path(".ate")), out=lambda _line: None).config
    absolute = DevStack(DevConfig(data_dir=tmp_path / ".ate"), out=lambda _line: None).config
    assert (relative.node, relative.subnet) == (absolute.node, absolute.subnet)


def test_flags_override_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[DevConfig] = []

    def fake_run(self: DevStack) -> int:
        seen.append(self.config)
        return 0

    monkeypatch.setattr(DevStack, "run", fake_run)
    runner = CliRunner()
    result = runner.invoke(app, ["dev", "--data-dir", "/srv/ate-a", "--node", "n1", "--subnet", "10.9.0.0/16"])
    assert result.exit_code == 0, result.output
    assert (seen[0].node, seen[0].subnet) == ("n1", "10.9.0.0/16")
    result = runner.invoke(app, ["dev", "--data-dir", "/srv/ate-b"])
    assert (seen[1].node, seen[1].subnet) == ("box-449d", "10.153.0.0/16")


def atelet_argv(config: DevConfig) -> list[str]:
    """The flags `ate dev` gives the atelet (after `python -m ate atelet`)."""
    config.resolve()
    child = atelet(config, {})
    assert child.argv[1:4] == ["-m", "ate", "atelet"]
    return child.argv[4:]


def flag(argv: list[str], name: str) -> str | None:
    """The value of `name` in `argv`, None when it is absent."""
    return argv[argv.index(name) + 1] if name in argv else None


def test_microvm_workers_go_to_the_atelet_beside_the_gvisor_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[DevConfig] = []
    monkeypatch.setattr(DevStack, "run", lambda self: seen.append(self.config) or 0)
    result = CliRunner().invoke(app, ["dev", "--data-dir", "/srv/ate-a", "--microvm-workers", "3"])
    assert result.exit_code == 0, result.output
    assert (seen[0].workers, seen[0].microvm_workers) == (2, 3)
    argv = atelet_argv(seen[0])
    assert (flag(argv, "--workers"), flag(argv, "--microvm-workers"), flag(argv, "--pool")) == ("2", "3", None)
    assert atelet(seen[0], {}).ready_message.endswith(", 2 gVisor workers and 3 microvm workers (QEMU VMs))")
    # by default no microvm worker, and the ready line as before
    plain = DevConfig(data_dir=Path("/srv/ate-a"))
    assert flag(atelet_argv(plain), "--microvm-workers") is None
    assert atelet(plain, {}).ready_message.endswith(", 2 workers)")


def test_microvm_workers_with_a_pool_file_are_refused_naming_both(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ran: list[DevConfig] = []
    monkeypatch.setattr(DevStack, "run", lambda self: ran.append(self.config) or 0)
    pool = tmp_path / "pool.yaml"
    pool.write_text("kind: WorkerPool\n")
    result = CliRunner().invoke(app, ["dev", "--pool", str(pool), "--microvm-workers", "1"])
    assert result.exit_code == 2, result.output
    message = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())
    assert "--microvm-workers" in message and "--pool" in message, message
    assert "cannot be used with --pool: put a pool of sandboxClass microvm in the pool file instead" in message
    assert ran == []  # nothing started
