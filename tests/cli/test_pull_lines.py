"""What `ate create template` prints about a Pending template's pulls (ate/cli/create.py
pull_lines): one line per node and image, with the API's own text of the look."""

from __future__ import annotations

from ate.cli.create import pull_lines


def test_each_nodes_pull_is_one_line() -> None:
    template = {"phase": "Pending", "pulls": [
        {"node": "n1", "image": "r.example.com/a:v1@sha256:ab", "text": "1.0 MiB of 3.0 MiB (2 layers)"},
        {"node": "n2", "image": "r.example.com/a:v1@sha256:ab", "text": "pulled 3.0 MiB (2 layers)"},
    ]}  # fmt: skip
    assert pull_lines(template) == [
        "pulling r.example.com/a:v1@sha256:ab on node n1: 1.0 MiB of 3.0 MiB (2 layers)",
        "pulling r.example.com/a:v1@sha256:ab on node n2: pulled 3.0 MiB (2 layers)",
    ]
    assert pull_lines({"phase": "Ready"}) == []
