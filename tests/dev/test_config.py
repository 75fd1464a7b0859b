"""`ate dev` defaults that must differ between two stacks on one machine."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ate.cli.main import app
from ate.dev import config as config_module
from ate.dev.config import DevConfig
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
