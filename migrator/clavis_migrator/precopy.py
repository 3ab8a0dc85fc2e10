"""Iterative pre-copy without dirty-page tracking: ship full dumps taken while the
container runs, then only the blocks that changed.

CRIU's own pre-copy (``criu pre-dump --track-mem``, then ``dump --prev-images-dir``) needs
the kernel's soft-dirty bits (CONFIG_MEM_SOFT_DIRTY), which this project's kernel lacks:
``criu pre-dump`` aborts (BUG at criu/mem.c:46) and ``--track-mem`` is refused ("Tracking
memory is not available"); docs/migrator.md, "Pre-copy". The rounds here get the same
effect on the wire by comparing dumps instead (the idea of Clark et al., "Live Migration
of Virtual Machines", NSDI 2005, §3: push rounds while running, then stop-and-copy what
is still dirty). Round 1 is a dump taken with the container left running (CRIU
``--leave-running``; the container pauses while its memory is written locally), sent
whole. Each later round, and the final dump, is compared with the previous round
block by block: the target turns its copy of the previous file into the new one
(``seed``: a rename, no copy) and receives only the blocks that differ (``patch``). CRIU
lays a process's pages out in address order in ``pages-N.img``, so an unchanged page
stays at the same offset while the process keeps its mappings; when it does not, more
blocks differ and more is sent, never a wrong file: the target's ``finish`` checks every
final file's SHA-256 against the source's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Final, Protocol

# CRIU's page images are whole 4 KiB pages; other image files are small.
BLOCK: Final = 4096
# Compare this much at once first: most of a dump is unchanged and a piece that is equal
# needs no per-block look.
_PIECE: Final = 256 * BLOCK
# Changed runs closer than this are sent as one: a few unchanged bytes cost less than a
# request each.
MERGE_GAP: Final = 16 * BLOCK
# A round whose changed bytes are at least this share of the previous round's has stopped
# converging: the dirty set no longer shrinks, so more rounds only cost pauses.
SHRINK: Final = 0.8


def changed_ranges(old: Path, new: Path) -> list[tuple[int, int]]:
    """(offset, length) of the parts of ``new`` that differ from ``old`` at the same offset.

    Bytes of ``new`` past the end of ``old`` are changed; ``new`` being shorter is the
    receiver's truncation, not a range.
    """
    runs: list[tuple[int, int]] = []

    def add(off: int, length: int) -> None:
        if runs and off - (runs[-1][0] + runs[-1][1]) <= MERGE_GAP:
            start = runs[-1][0]
            runs[-1] = (start, off + length - start)
        else:
            runs.append((off, length))

    with open(old, "rb") as fo, open(new, "rb") as fn:
        off = 0
        while True:
            b = fn.read(_PIECE)
            if not b:
                break
            a = fo.read(_PIECE)
            if a != b:
                for i in range(0, len(b), BLOCK):
                    if a[i : i + BLOCK] != b[i : i + BLOCK]:
                        add(off + i, min(BLOCK, len(b) - i))
            off += len(b)
    return runs


def split(ranges: list[tuple[int, int]], chunk: int) -> Iterator[tuple[int, int]]:
    """The ranges cut into pieces of at most ``chunk`` bytes (one request each)."""
    for off, length in ranges:
        for o in range(off, off + length, chunk):
            yield o, min(chunk, off + length - o)


def converged(round_no: int, sent: int, previous: int, chunk: int) -> bool:
    """Whether to stop pre-copying after round ``round_no`` sent ``sent`` bytes.

    Round 1 sends everything and says nothing about the dirty set. From round 2: stop
    when what changed fits one chunk (the final dump will send about as little) or did
    not shrink below ``SHRINK`` of the round before.
    """
    if round_no < 2:
        return False
    return sent <= chunk or sent >= SHRINK * previous


class Sender(Protocol):
    """The target calls pre-copy needs (PeerClient)."""

    def put(
        self, step_id: str, rel: str, offset: int, chunk: bytes, patch: bool = False
    ) -> None: ...

    def seed(self, step_id: str, rel: str, base: str, size: int) -> None: ...


def ship(
    peer: Sender,
    step_id: str,
    images: Path,
    prefix: str,
    *,
    base: tuple[Path, str] | None,
    chunk: int,
) -> int:
    """Send every file of ``images`` to the target under ``prefix``; the bytes sent.

    With ``base`` (a local directory and where the target holds the same files), a file
    also in the base is sent as the blocks that differ from it; other files whole.
    """
    sent = 0
    for p in sorted(f for f in images.rglob("*") if f.is_file()):
        rel_local = p.relative_to(images)
        rel = f"{prefix}/{rel_local}" if prefix else str(rel_local)
        old = base[0] / rel_local if base is not None else None
        if base is not None and old is not None and old.is_file():
            size = p.stat().st_size
            peer.seed(step_id, rel, f"{base[1]}/{rel_local}", size)
            with open(p, "rb") as f:
                for off, length in split(changed_ranges(old, p), chunk):
                    f.seek(off)
                    peer.put(step_id, rel, off, f.read(length), patch=True)
                    sent += length
            continue
        with open(p, "rb") as f:
            offset = 0
            while data := f.read(chunk):
                peer.put(step_id, rel, offset, data)
                offset += len(data)
                sent += len(data)
    return sent
