"""Steps on disk: one JSON file per step id, each write a whole file (temp, fsync, rename).

This is what makes a step id seen before a status query across agent restarts: the
record is written (state ``accepted``) before the POST is answered, and every phase is
written before it starts, so a restarted agent knows how far a step got (steps.py
recovers it).
"""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import Field

from clavis_contracts import MigrationStep, StepStatus
from clavis_contracts.common import AwareDatetime, Strict
from clavis_contracts.migration import TERMINAL_STATES, StepState

# How far a step got on its source. "committing" is written before the source's state is
# deleted: past it the move is final and recovery finishes it instead of undoing it.
Phase = Literal[
    "queued", "prepare", "precopy", "checkpoint", "transfer", "restore", "committing", "finished"
]


def now() -> datetime:
    return datetime.now(UTC)


class StepRecord(Strict):
    step: MigrationStep
    state: StepState
    phase: Phase = "queued"
    message: str = ""
    # one line per thing that happened, in order: what the status message is built from
    events: list[str] = Field(default_factory=list)
    created: AwareDatetime
    updated: AwareDatetime
    seconds: float | None = None
    frozen_s: float | None = None
    # wall-clock time the dump began (the container stops): a restarted agent still knows
    stopped_at: AwareDatetime | None = None
    bytes_moved: int = 0
    precopy_rounds: int = 0
    # wall-clock time (epoch s) past which the target kills a restored copy it has not
    # heard committed (fencing, Incoming.expire): written before the restore is asked
    fence_at: float | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def status(self) -> StepStatus:
        return StepStatus(
            step_id=self.step.step_id,
            state=self.state,
            message=self.message[-4096:],
            updated=self.updated,
            seconds=self.seconds if self.terminal else None,
            frozen_s=None if self.frozen_s is None else round(self.frozen_s, 3),
            bytes_moved=self.bytes_moved,
            precopy_rounds=self.precopy_rounds,
        )


def _file_name(step_id: str) -> str:
    # step ids are '<plan>:<index>' (checked by the contract); ':' is awkward in paths
    return step_id.replace(":", "_") + ".json"


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class StepStore:
    """The step records of this agent, in memory and under ``dir``."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._steps: dict[str, StepRecord] = {}
        for f in sorted(self.dir.glob("*.json")):
            rec = StepRecord.model_validate_json(f.read_bytes())
            self._steps[rec.step.step_id] = rec

    def get(self, step_id: str) -> StepRecord | None:
        with self._lock:
            return self._steps.get(step_id)

    def all(self) -> list[StepRecord]:
        with self._lock:
            return list(self._steps.values())

    def add(self, step: MigrationStep, state: StepState, message: str = "") -> StepRecord:
        """Store a new step; a step id already stored is returned unchanged (never re-added)."""
        with self._lock:
            old = self._steps.get(step.step_id)
            if old is not None:
                return old
            t = now()
            rec = StepRecord(
                step=step,
                state=state,
                message=message,
                events=[message] if message else [],
                created=t,
                updated=t,
                phase="finished" if state in TERMINAL_STATES else "queued",
                seconds=0.0 if state in TERMINAL_STATES else None,
            )
            self._save(rec)
            return rec

    def update(self, rec: StepRecord, **changes: object) -> StepRecord:
        """Write ``rec`` with ``changes`` (and a new time) to disk, then to memory."""
        with self._lock:
            new = rec.model_copy(update={**changes, "updated": now()})
            self._save(new)
            return new

    def _save(self, rec: StepRecord) -> None:
        write_atomic(self.dir / _file_name(rec.step.step_id), rec.model_dump_json().encode())
        self._steps[rec.step.step_id] = rec
