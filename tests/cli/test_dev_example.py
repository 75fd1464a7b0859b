"""`ate dev --example`: creates atespace demo, template counter and actor c1 once, via the API."""

from pathlib import Path

from ate.dev.config import DevConfig
from ate.dev.stack import DevStack

from .conftest import ServerThread
from .test_commands import TEMPLATE_YAML


def test_example_is_created_once(api_server: ServerThread, tmp_path: Path) -> None:
    (tmp_path / "examples" / "counter").mkdir(parents=True)
    (tmp_path / "examples" / "counter" / "template.yaml").write_text(TEMPLATE_YAML)
    port = int(api_server.url.rsplit(":", 1)[1])
    lines: list[str] = []
    stack = DevStack(DevConfig(data_dir=tmp_path / ".ate", api_port=port, image_root=tmp_path), out=lines.append)
    stack._create_example()
    assert lines[:4] == [
        "example: atespace demo created",
        f"example: creating template counter from {tmp_path / 'examples/counter/template.yaml'} (waiting for Ready)",
        "example: template counter Ready",
        "example: actor c1 created",
    ]
    assert ("demo", "c1") in api_server.state.actors
    lines.clear()
    stack._create_example()
    assert len(lines) == 1 and lines[0].startswith("example: try  curl")
