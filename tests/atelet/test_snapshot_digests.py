"""atelet.snapshots.digests: a snapshot file's SHA-256 is read once while the file is unchanged,
and read again after any change, however soon after the hashing it comes."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from atelet.snapshots.digests import REMEMBER_SECONDS, SETTLE_FOR_BYTES, SETTLED_NS, FileDigests

MIB = 1 << 20


def written(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def settle() -> None:
    time.sleep(SETTLED_NS / 1e9 + 0.01)


def test_a_settled_unchanged_file_is_hashed_once(tmp_path: Path) -> None:
    data = os.urandom(MIB)
    path = written(tmp_path / "pages.img", data)
    settle()
    digests = FileDigests()
    assert digests.sha256(path) == hashlib.sha256(data).hexdigest()
    assert digests.sha256(path) == hashlib.sha256(data).hexdigest()
    assert digests.hashed_bytes == MIB  # the second answer did not read the file


def test_a_file_changed_in_place_with_the_same_size_is_hashed_again(tmp_path: Path) -> None:
    data = os.urandom(MIB)
    path = written(tmp_path / "pages.img", data)
    settle()
    digests = FileDigests()
    digests.sha256(path)
    with open(path, "r+b") as f:  # a corruption: same size, one byte changed, right after the check
        f.write(b"X" if data[:1] != b"X" else b"Y")
    assert digests.sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert digests.sha256(path) != hashlib.sha256(data).hexdigest()


def test_a_file_hashed_just_after_it_was_written_is_not_remembered(tmp_path: Path) -> None:
    # Within one tick of the coarse file clock a second write could leave the same times: such a
    # digest is not trusted for later checks, so a change right after the hashing is seen.
    data = os.urandom(4096)
    path = written(tmp_path / "pages_meta.img", data)
    digests = FileDigests()
    digests.sha256(path)
    with open(path, "r+b") as f:
        f.write(bytes([data[0] ^ 0xFF]))
    assert digests.sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert digests.hashed_bytes == 2 * 4096


def test_a_large_file_hashed_as_it_is_committed_settles_first_and_is_remembered(tmp_path: Path) -> None:
    data = os.urandom(SETTLE_FOR_BYTES)
    path = written(tmp_path / "pages.img", data)  # just written, as by a checkpoint
    digests = FileDigests()
    assert digests.sha256(path, settle=True) == hashlib.sha256(data).hexdigest()
    assert digests.sha256(path) == hashlib.sha256(data).hexdigest()
    assert digests.hashed_bytes == SETTLE_FOR_BYTES  # the check after the commit did not read it


def test_a_file_replaced_by_rename_is_hashed_again(tmp_path: Path) -> None:
    path = written(tmp_path / "volume.tar", os.urandom(MIB))
    settle()
    digests = FileDigests()
    digests.sha256(path)
    other = written(tmp_path / "other", os.urandom(MIB))
    other.replace(path)
    assert digests.sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_remembered_digest_is_trusted_only_for_a_while(tmp_path: Path) -> None:
    path = written(tmp_path / "pages.img", os.urandom(MIB))
    settle()
    now = [1000.0]
    digests = FileDigests(clock=lambda: now[0])
    digests.sha256(path)
    now[0] += REMEMBER_SECONDS - 1
    digests.sha256(path)
    assert digests.hashed_bytes == MIB  # still trusted
    now[0] += 2
    digests.sha256(path)
    assert digests.hashed_bytes == 2 * MIB  # read again once the lifetime was over


def test_the_memory_is_bounded(tmp_path: Path) -> None:
    paths = [written(tmp_path / f"f{i}", os.urandom(100)) for i in range(5)]
    settle()
    digests = FileDigests(capacity=3)
    for path in paths:
        digests.sha256(path)
    before = digests.hashed_bytes
    digests.sha256(paths[0])  # the oldest was forgotten: read again
    assert digests.hashed_bytes == before + 100
    digests.sha256(paths[4])  # among the last three: remembered
    assert digests.hashed_bytes == before + 100
