"""What a FULL snapshot keeps of its sandbox's output and what a restore from another actor's
snapshot inherits (atelet/output.py keep_output, inherit): the saved sandbox's own lines only,
at most OUTPUT_BYTES of them from a line's start, appended with a newline."""

from __future__ import annotations

from pathlib import Path

from atelet.output import inherit, keep_output
from atelet.snapshots.manifest import OUTPUT_BYTES


def test_a_snapshot_keeps_the_saved_sandboxs_newest_lines(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    earlier = b"an earlier sandbox's line\n"
    log.write_bytes(earlier + b"listening\nserved 1\n")
    kept = tmp_path / "output.log"
    keep_output(log, len(earlier), kept)
    assert kept.read_bytes() == b"listening\nserved 1\n"
    # more than OUTPUT_BYTES: the newest whole lines that fit
    line = b"x" * 99 + b"\n"  # 100 bytes
    log.write_bytes(line * (OUTPUT_BYTES // 100 + 50))
    keep_output(log, 0, kept)
    assert kept.read_bytes() == line * (OUTPUT_BYTES // 100)
    # nothing printed: nothing kept
    empty = tmp_path / "none"
    keep_output(tmp_path / "missing.log", 0, empty)
    assert not empty.exists()


def test_a_restore_appends_what_the_snapshot_kept(tmp_path: Path) -> None:
    kept = tmp_path / "output.log"
    kept.write_bytes(b"listening")  # no newline at the end
    log = tmp_path / "logs" / "b.log"
    inherit(kept, log)
    inherit(tmp_path / "nothing-kept", log)
    assert log.read_bytes() == b"listening\n"
