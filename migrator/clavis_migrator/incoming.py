"""The target's side of a step: admit it, receive its images, restore, commit or abort.

Images arrive as files in chunks at explicit offsets into ``incoming/<step>/images``; a
chunk whose offset is not the file's current size is refused, and ``prepare`` empties the
directory, so a transfer that was interrupted is restarted from nothing by the source and
never mixes two attempts. ``finish`` re-reads every file from disk against the source's
manifest (size and SHA-256) and refuses extra or missing files before a restore may run.

A restore comes with a fence time: the copy restored here is killed at that time unless
the source has committed by then (``expire``), so a link cut during the restore never
leaves the container running on both hosts (docs/migrator.md, "Fencing").

Pre-copy (precopy.py) sends its rounds under ``pre/K/``; ``seed`` makes a file from the
same file of an earlier round (a rename and a truncation), and a ``patch`` chunk then
overwrites changed blocks inside it. ``finish`` ignores ``pre/`` (the manifest covers the
final dump only) and deletes it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import shutil
import threading
import time
from pathlib import Path, PurePosixPath
from typing import Any, Final

from clavis_contracts import MigrationStep
from clavis_migrator.backend import Backend, BackendError
from clavis_migrator.hooks import run_hook
from clavis_migrator.pause import pause_point
from clavis_migrator.store import write_atomic

log = logging.getLogger("clavis_migrator.incoming")

# where pre-copy rounds arrive, under a step's images (never a CRIU image name)
PRECOPY_DIR: Final = "pre"
# a step's marker once restored here (with its fence time)
RESTORED: Final = "restored"
# how a restored step ended here, kept in ENDED_DIR (beside the incoming directory) for
# a source that asks again
COMMITTED: Final = "committed"
FENCED: Final = "fenced"
ENDED_DIR: Final = "ended"
TOMBSTONE_S: Final = 3600.0


class RefusedError(Exception):
    """The target refuses the request; the message is sent back as the reason."""


def safe_relpath(rel: str) -> PurePosixPath:
    p = PurePosixPath(rel)
    if not rel or p.is_absolute() or any(part in ("", ".", "..") for part in p.parts):
        raise RefusedError(f"bad image file name {rel!r}")
    if len(p.parts) > 4 or len(rel) > 255:
        raise RefusedError(f"image file name too long or too deep: {rel!r}")
    return p


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(2**20):
            h.update(block)
    return h.hexdigest()


class Incoming:
    def __init__(
        self,
        host: str,
        directory: Path,
        backend: Backend,
        capacity: tuple[int, int],
        network_hook: tuple[str, ...] = (),
    ) -> None:
        self.host = host
        self.network_hook = network_hook
        self.dir = directory
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Images of steps not restored here are of no use after a restart (a source that
        # still sends prepares again); a restored step's stay for its source's commit/abort.
        # beside the incoming images, not among them: a record, not a step's state
        self.ended = self.dir.parent / ENDED_DIR
        self.ended.mkdir(mode=0o700, exist_ok=True)
        for d in self.dir.iterdir():
            if d.is_dir() and not (d / RESTORED).is_file():
                shutil.rmtree(d, ignore_errors=True)
        self.backend = backend
        self.cores, self.memory = capacity
        self._lock = threading.Lock()
        # one lock per step: an abort that arrives while a restore still runs (the source
        # timed out waiting) waits for it, then undoes it; never deletes images under CRIU
        self._step_locks: dict[str, threading.Lock] = {}

    def _step_lock(self, step_id: str) -> threading.Lock:
        with self._lock:
            return self._step_locks.setdefault(step_id, threading.Lock())

    def _step_dir(self, step_id: str) -> Path:
        return self.dir / step_id.replace(":", "_")

    def _step(self, step_id: str) -> MigrationStep:
        f = self._step_dir(step_id) / "step.json"
        if not f.is_file():
            raise RefusedError(f"step {step_id} was not prepared on {self.host}")
        return MigrationStep.model_validate_json(f.read_bytes())

    def images(self, step_id: str) -> Path:
        return self._step_dir(step_id) / "images"

    def prepare(self, step: MigrationStep) -> dict[str, Any]:
        if step.target != self.host:
            raise RefusedError(
                f"this agent is host {self.host}, not the step's target {step.target}"
            )
        with self._lock:
            if not self.backend.known(step.container):
                raise RefusedError(f"container {step.container} is unknown on {self.host}")
            running = self.backend.running()
            if step.container in running:
                raise RefusedError(f"container {step.container} already runs on {self.host}")
            # what the other steps admitted here and not yet restored will use too
            pending = [
                self._step(d.name.replace("_", ":"))
                for d in self.dir.iterdir()
                if (d / "step.json").is_file() and d.name != step.step_id.replace(":", "_")
            ]
            pending = [p for p in pending if p.container not in running]
            cores = sum(s.cores for s in running.values()) + sum(p.cores for p in pending)
            memory = sum(s.memory_bytes for s in running.values()) + sum(
                p.memory_bytes for p in pending
            )
            if cores + step.cores > self.cores:
                raise RefusedError(
                    f"target {self.host} over its cores: {cores} in use + {step.cores} "
                    f"> {self.cores}"
                )
            if memory + step.memory_bytes > self.memory:
                raise RefusedError(
                    f"target {self.host} over its memory: {memory} bytes in use + "
                    f"{step.memory_bytes} > {self.memory}"
                )
            d = self._step_dir(step.step_id)
            shutil.rmtree(d, ignore_errors=True)
            (d / "images").mkdir(parents=True)
            write_atomic(d / "step.json", step.model_dump_json().encode())
        return {"host": self.host}

    def put(self, step_id: str, rel: str, offset: int, chunk: bytes, patch: bool = False) -> None:
        self._step(step_id)
        path = self.images(step_id) / safe_relpath(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        size = path.stat().st_size if path.exists() else 0
        if offset == 0 and not any(self.images(step_id).iterdir()):
            pause_point("target-receiving")
        if patch:
            # overwrite inside a file seeded from an earlier round: never grow it
            if offset < 0 or offset + len(chunk) > size:
                raise RefusedError(
                    f"{rel}: patch of {len(chunk)} bytes at {offset} outside its {size} bytes"
                )
        elif offset != size:
            raise RefusedError(f"{rel}: chunk at offset {offset}, file has {size} bytes")
        try:
            with open(path, "r+b" if patch else "ab") as f:
                if patch:
                    f.seek(offset)
                f.write(chunk)
        except OSError as exc:
            # leave no partial chunk: the source's retry restarts the whole transfer
            raise RefusedError(f"cannot write {rel} on {self.host}: {exc.strerror}") from exc

    def seed(self, step_id: str, rel: str, base: str, size: int) -> None:
        """Make ``rel`` from the earlier round's ``base`` (moved, then cut to ``size``)."""
        self._step(step_id)
        root = self.images(step_id)
        src, dst = root / safe_relpath(base), root / safe_relpath(rel)
        if not base.startswith(PRECOPY_DIR + "/") or not src.is_file():
            raise RefusedError(f"seed of {rel}: no earlier round's file {base}")
        if size < 0:
            raise RefusedError(f"seed of {rel}: size {size}")
        dst.parent.mkdir(parents=True, exist_ok=True)
        src.replace(dst)
        try:
            with open(dst, "r+b") as f:
                f.truncate(size)
        except OSError as exc:
            raise RefusedError(f"cannot size {rel} on {self.host}: {exc.strerror}") from exc

    def finish(self, step_id: str, manifest: list[dict[str, Any]]) -> None:
        self._step(step_id)
        root = self.images(step_id)
        want = {str(safe_relpath(str(m["path"]))): m for m in manifest}
        # earlier pre-copy rounds are not part of the final images
        shutil.rmtree(root / PRECOPY_DIR, ignore_errors=True)
        have = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
        if have != set(want):
            raise RefusedError(
                f"image files differ from the manifest: missing {sorted(set(want) - have)}, "
                f"extra {sorted(have - set(want))}"
            )
        for rel, m in want.items():
            f = root / rel
            if f.stat().st_size != m["size"] or sha256_file(f) != m["sha256"]:
                raise RefusedError(f"{rel}: size or SHA-256 differs from the source's")
        (self._step_dir(step_id) / "complete").write_text(json.dumps(len(want)))

    def restore(self, step_id: str, fence_at: float) -> dict[str, Any]:
        with self._step_lock(step_id):
            return self._restore(step_id, fence_at)

    def _restore(self, step_id: str, fence_at: float) -> dict[str, Any]:
        step = self._step(step_id)
        d = self._step_dir(step_id)
        if not (d / "complete").is_file():
            raise RefusedError(f"step {step_id}: images not complete on {self.host}")
        if time.time() >= fence_at:
            raise RefusedError(f"step {step_id}: asked to restore after its fence time")
        try:
            self.backend.restore(step.container, self.images(step_id))
            seen = self.backend.verify(step.container)
            said = run_hook(self.network_hook, step.container, self.host)
            if said:
                seen += f"; network hook: {said}"
            pause_point("target-restored")
            # Restored too late: the source may already be restoring its own copy.
            if time.time() >= fence_at:
                raise BackendError("the restore ended after the step's fence time")
        except BackendError as exc:
            # never leave a half-restored container here: the source restores its own
            try:
                self.backend.kill(step.container)
            except BackendError as kexc:
                raise RefusedError(
                    f"restore on {self.host} failed: {exc}; and kill: {kexc}"
                ) from exc
            raise RefusedError(f"restore on {self.host} failed: {exc}") from exc
        write_atomic(d / RESTORED, json.dumps({"fence_at": fence_at}).encode())
        return {"verified": seen}

    def commit(self, step_id: str) -> None:
        """The source commits: the restored copy is the container from now on. Asked
        again (an answer lost on the way), the same answer; a copy fenced meanwhile is
        refused, so the source runs its own again."""
        with self._step_lock(step_id):
            self._commit(step_id)

    def _commit(self, step_id: str) -> None:
        outcome = self._outcome(step_id)
        if outcome == COMMITTED:
            return
        if outcome == FENCED:
            raise RefusedError(
                f"fenced: the copy restored on {self.host} was killed at its fence time, "
                "no commit having come"
            )
        step = self._step(step_id)
        d = self._step_dir(step_id)
        if not (d / RESTORED).is_file():
            raise RefusedError(f"step {step_id} was not restored on {self.host}")
        self.backend.commit(step.container, self.images(step_id))
        self._end(step_id, COMMITTED)

    def _outcome(self, step_id: str) -> str | None:
        f = self.ended / self._step_dir(step_id).name
        return f.read_text().strip() if f.is_file() else None

    def _end(self, step_id: str, outcome: str) -> None:
        """The step's directory gone, its outcome kept for a source that asks again."""
        write_atomic(self.ended / self._step_dir(step_id).name, outcome.encode())
        shutil.rmtree(self._step_dir(step_id), ignore_errors=True)

    def expire(self, now: float | None = None) -> list[str]:
        """What the sweep does (every EXPIRE_EVERY_S); the ids of the steps it ended.

        - Images of a step not restored here whose deadline has passed are deleted. A
          source never asks for a restore after its step's deadline (it checks it before
          the restore), and it started the step before it prepared here, so past prepare
          time + ``deadline_s`` they are of no use. Without this, a source that gave up
          while it could not reach this host (a cut link) would leave them, and their
          admitted cores and memory, here until the agent restarts.
        - Fencing: a copy restored here that has not been committed by the step's fence
          time is killed. The source rolls back without hearing from this host only after
          that time (plus the clocks' allowed skew and one sweep), so the container never
          runs on both hosts when the link between them is cut during the restore.
        - Outcomes (committed, fenced: one small file each in ``ended/``) are forgotten
          after TOMBSTONE_S.

        Returns the ids of the steps whose images were deleted at their deadline (a copy
        fenced is logged here).
        """
        now = time.time() if now is None else now
        gone: list[str] = []
        for d in sorted(self.dir.iterdir()):
            spec = d / "step.json"
            if not d.is_dir() or not spec.is_file():
                continue
            step_id = d.name.replace("_", ":")
            lock = self._step_lock(step_id)
            if not lock.acquire(blocking=False):
                continue  # a restore holds it: not expired, or its answer decides
            try:
                if self._expired(step_id, spec, now) == "deadline":
                    gone.append(step_id)
            except (OSError, ValueError):
                continue  # removed meanwhile (an abort), or not ours to judge
            finally:
                lock.release()
        for f in sorted(self.ended.iterdir()):
            if now >= f.stat().st_mtime + TOMBSTONE_S:
                f.unlink(missing_ok=True)
        return gone

    def _expired(self, step_id: str, spec: Path, now: float) -> str | None:
        """Why the step ended now ("fenced", "deadline"), or None if it goes on."""
        step = MigrationStep.model_validate_json(spec.read_bytes())
        restored = spec.parent / RESTORED
        if restored.is_file():
            if now < _fence_at(restored):
                return None
            self.backend.kill(step.container)
            self._end(step_id, FENCED)
            log.warning(
                "step=%s host=%s %s killed: restored, no commit by its fence time",
                step.step_id, self.host, step.container,
            )  # fmt: skip
            return FENCED
        if now < spec.stat().st_mtime + step.deadline_s:
            return None
        shutil.rmtree(spec.parent, ignore_errors=True)
        return "deadline"

    def abort(self, step_id: str) -> dict[str, Any]:
        """Undo whatever this step did here; a step never prepared here is nothing to undo."""
        with self._step_lock(step_id):
            return self._abort(step_id)

    def _abort(self, step_id: str) -> dict[str, Any]:
        outcome = self._outcome(step_id)
        if outcome == COMMITTED:
            raise RefusedError(f"step {step_id} was committed: the container runs here")
        if outcome == FENCED:
            return {"did": f"nothing: the copy restored on {self.host} was fenced already"}
        d = self._step_dir(step_id)
        if not (d / "step.json").is_file():
            return {"did": "nothing"}
        step = self._step(step_id)
        did = "images deleted"
        if step.container in self.backend.running():
            self.backend.kill(step.container)
            did = f"{step.container} killed on {self.host}, images deleted"
        shutil.rmtree(d, ignore_errors=True)
        return {"did": did}


def _fence_at(restored: Path) -> float:
    """The fence time a restore wrote; none (a file of an older agent): never fenced."""
    try:
        doc = json.loads(restored.read_bytes())
    except ValueError:
        return math.inf
    at = doc.get("fence_at") if isinstance(doc, dict) else None
    return float(at) if isinstance(at, int | float) else math.inf
