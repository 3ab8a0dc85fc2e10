"""Pre-copy (precopy.py): the block diff, the stop rule, and rounds between two agents."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clavis_migrator import precopy
from clavis_migrator.incoming import Incoming, RefusedError

from .world import TableBackend, files_under, make_agent, post, step, table, wait_terminal

B = precopy.BLOCK


def _files(tmp_path: Path, old: bytes, new: bytes) -> tuple[Path, Path]:
    a, b = tmp_path / "old", tmp_path / "new"
    a.write_bytes(old)
    b.write_bytes(new)
    return a, b


def test_changed_ranges_finds_the_changed_blocks_and_the_growth(tmp_path: Path) -> None:
    old = os.urandom(300 * B)
    new = bytearray(old)
    new[5 * B + 7] ^= 1  # one byte in block 5
    new[200 * B] ^= 1  # block 200, far from block 5: a range of its own
    new += os.urandom(B // 2)  # the file grew by half a block
    a, b = _files(tmp_path, old, bytes(new))
    assert precopy.changed_ranges(a, b) == [(5 * B, B), (200 * B, B), (300 * B, B // 2)]
    a, b = _files(tmp_path, old, old)
    assert precopy.changed_ranges(a, b) == []
    a, b = _files(tmp_path, old, old[: 10 * B])  # shorter: the receiver truncates
    assert precopy.changed_ranges(a, b) == []


def test_near_changed_blocks_merge_into_one_range(tmp_path: Path) -> None:
    old = os.urandom(64 * B)
    new = bytearray(old)
    new[2 * B] ^= 1
    new[6 * B] ^= 1  # 3 unchanged blocks between: cheaper sent than a request more
    a, b = _files(tmp_path, old, bytes(new))
    assert precopy.changed_ranges(a, b) == [(2 * B, 5 * B)]


def test_split_cuts_ranges_to_chunks() -> None:
    assert list(precopy.split([(0, 10), (100, 4)], 4)) == [(0, 4), (4, 4), (8, 2), (100, 4)]


@pytest.mark.parametrize(
    ("round_no", "sent", "previous", "stop"),
    [
        (1, 10**9, 0, False),  # round 1 sends everything: nothing learnt yet
        (2, 100, 10**9, True),  # fits one chunk: the final dump sends as little
        (2, 10**6, 10**9, False),  # still shrinking fast
        (3, 9 * 10**5, 10**6, True),  # no longer shrinking
    ],
)
def test_converged(round_no: int, sent: int, previous: int, stop: bool) -> None:
    assert precopy.converged(round_no, sent, previous, chunk=4096) is stop


def _dirty_one_block(mem: bytes) -> bytes:
    # a running container rewriting a small hot set: block 3 changes after every dump
    b = bytearray(mem)
    b[3 * B : 4 * B] = os.urandom(B)
    return bytes(b)


def test_rounds_ship_the_memory_once_then_only_what_changed(tmp_path: Path) -> None:
    t = table("c1", memory=64 * B)
    a1, b1 = make_agent(tmp_path, "h1", t, precopy_rounds=4)
    a2, _ = make_agent(tmp_path, "h2", t)
    try:
        b1.dirty = _dirty_one_block
        post(a1.port, step(a2.port))
        done = wait_terminal(a1.port, "1:0")
        final_memory = t.memory["c1"]
    finally:
        a1.stop()
        a2.stop()
    assert done["state"] == "done", done
    assert t.where["c1"] == "h2"
    # the target holds exactly the memory of the final dump, built from round 1's copy
    # and two patched blocks, byte for byte (and by SHA-256 at finish)
    assert t.memory["c1"] == final_memory
    # round 2 changed one block only: it stops there (one chunk), then the final dump
    assert done["precopy_rounds"] == 2, done["message"]
    assert t.calls[:3] == [
        "precheckpoint c1 on h1", "precheckpoint c1 on h1", "checkpoint c1 on h1"
    ]  # fmt: skip
    # round 1: all 64 blocks (+3 bytes of inventory); round 2 and the final: one block each
    assert done["bytes_moved"] == 64 * B + 3 + B + B, done["message"]
    assert "changed since pre-copy round 2" in done["message"]
    assert done["frozen_s"] is not None and 0 < done["frozen_s"] <= done["seconds"]
    assert files_under(tmp_path / "h1" / "outgoing") == []
    assert files_under(tmp_path / "h2" / "incoming") == []


def test_a_round_that_cannot_be_dumped_ends_the_precopy_not_the_step(tmp_path: Path) -> None:
    t = table("c1", memory=16 * B)
    a1, b1 = make_agent(tmp_path, "h1", t, precopy_rounds=3)
    a2, _ = make_agent(tmp_path, "h2", t)
    try:
        before = t.memory["c1"]
        b1.fail.add("precheckpoint")
        post(a1.port, step(a2.port))
        done = wait_terminal(a1.port, "1:0")
    finally:
        a1.stop()
        a2.stop()
    assert done["state"] == "done", done
    assert t.memory["c1"] == before and done["precopy_rounds"] == 0
    assert "pre-copy round 1 not dumped" in done["message"]
    assert done["bytes_moved"] == 16 * B + 3


def test_a_patch_outside_the_file_is_refused(tmp_path: Path) -> None:
    t = table("c1")
    t.where["c1"] = "h1"
    inc = Incoming("h2", tmp_path / "inc", TableBackend("h2", t), (4, 2**30))
    s = step(1)
    inc.prepare(s)
    inc.put(s.step_id, "pre/1/pages-1.img", 0, b"a" * 10)
    inc.seed(s.step_id, "pages-1.img", "pre/1/pages-1.img", 12)
    inc.put(s.step_id, "pages-1.img", 8, b"bcd", patch=True)
    assert (inc.images(s.step_id) / "pages-1.img").read_bytes() == b"a" * 8 + b"bcd\0"
    with pytest.raises(RefusedError, match="outside"):
        inc.put(s.step_id, "pages-1.img", 10, b"xyz", patch=True)
    with pytest.raises(RefusedError, match="no earlier round"):
        inc.seed(s.step_id, "x.img", "pages-1.img", 1)
