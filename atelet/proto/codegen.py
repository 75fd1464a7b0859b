"""Regenerates (``main``) or checks (``check``) the committed gRPC code for ``atelet.proto``.

The generated modules are ``atelet.proto.atelet_pb2`` (+ ``.pyi``) and ``atelet_pb2_grpc``,
produced by grpcio-tools run from the repository root so their imports are package-absolute.
Usage: ``python -m atelet.proto.codegen`` (regenerate) or ``python -m atelet.proto.codegen
--check`` (exit 1 when the committed files differ from a fresh generation).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PROTO = "atelet/proto/atelet.proto"
GENERATED = ("atelet_pb2.py", "atelet_pb2.pyi", "atelet_pb2_grpc.py")
# Generated code follows protoc's style, not ours: the linter skips it.
HEADER = "# ruff: noqa\n"


def _generate(out_dir: Path) -> None:
    """Runs protoc (grpcio-tools) on ``PROTO`` into ``out_dir``; raises RuntimeError on failure."""
    from grpc_tools import protoc  # dev dependency: imported only when generating

    include = str(Path(protoc.__file__).parent / "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{REPO_ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        str(REPO_ROOT / PROTO),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {PROTO}")
    for name in GENERATED:
        path = out_dir / "atelet" / "proto" / name
        path.write_text(HEADER + path.read_text())


def main() -> None:
    """Regenerates the committed modules next to the .proto file."""
    _generate(REPO_ROOT)
    print(f"regenerated {', '.join(GENERATED)} from {PROTO}")


def check() -> list[str]:
    """Returns the names of the committed generated files that are stale or missing (empty = fresh)."""
    stale = []
    with tempfile.TemporaryDirectory() as tmp:
        _generate(Path(tmp))
        for name in GENERATED:
            fresh = (Path(tmp) / "atelet" / "proto" / name).read_bytes()
            committed = REPO_ROOT / "atelet" / "proto" / name
            if not committed.exists() or committed.read_bytes() != fresh:
                stale.append(name)
    return stale


if __name__ == "__main__":
    if "--check" in sys.argv[1:]:
        bad = check()
        if bad:
            print(f"stale generated code: {', '.join(bad)}; run python -m atelet.proto.codegen")
            sys.exit(1)
        print("generated code is up to date")
    else:
        main()
