"""The committed gRPC code matches atelet.proto."""

from atelet.proto import codegen


def test_generated_code_is_fresh() -> None:
    assert codegen.check() == [], "stale generated code: run python -m atelet.proto.codegen"
