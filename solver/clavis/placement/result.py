"""What every placement method takes and returns, whatever it is inside."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from clavis.instance import Assignment
from clavis.objectives import Score

Status = Literal["OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN", "MODEL_INVALID"]


class TooLargeError(ValueError):
    """The method cannot handle an instance this large within its limits; said at once,
    before any work (the CLI exits 2 with the message)."""


@dataclass(frozen=True)
class Progress:
    """An improvement seen during a solve: elapsed seconds, F so far, proven bound."""

    seconds: float
    F: float
    bound: float | None


@dataclass(frozen=True)
class SolveOptions:
    time_limit: float = 60.0
    seed: int = 0
    workers: int = 0  # 0: every core of the machine
    hint: Assignment | None = None
    on_progress: Callable[[Progress], None] | None = None
    # Reproducible answers: one CP-SAT worker and a deterministic time budget
    # (time_limit read as CP-SAT deterministic seconds), so a seed fixes the result.
    deterministic: bool = False
    # Most resident memory the solve may use, in bytes; None: guard.default_memory_budget.
    memory_limit: int | None = None

    def __post_init__(self) -> None:
        if not self.time_limit > 0:
            raise ValueError(f"time limit must be positive, got {self.time_limit}")
        if self.workers < 0:
            raise ValueError(f"workers must be >= 0, got {self.workers}")
        if self.memory_limit is not None and self.memory_limit <= 0:
            raise ValueError(f"memory limit must be positive, got {self.memory_limit}")

    @property
    def threads(self) -> int:
        return self.workers or os.cpu_count() or 1


@dataclass(frozen=True)
class PlacementResult:
    method: str
    status: Status
    assignment: Assignment | None
    score: Score | None
    bound: float | None  # proven lower bound on F, when the method proves one
    seconds: float
    trajectory: tuple[Progress, ...] = field(default=())
    # Why a turn of the solve was skipped or cut short (time, memory, model size).
    notes: tuple[str, ...] = field(default=())

    @property
    def gap(self) -> float | None:
        """Relative distance between F and the proven bound (0 = proven optimal)."""
        if self.score is None or self.bound is None:
            return None
        f = self.score.F
        return 0.0 if f <= self.bound + 1e-9 else (f - self.bound) / max(abs(f), 1e-12)


class Stopwatch:
    """Elapsed wall time and the improving-solution trajectory of a heuristic."""

    def __init__(self, options: SolveOptions) -> None:
        self.start = time.monotonic()
        self.options = options
        self.trajectory: list[Progress] = []
        self.best = float("inf")
        # The best bound offered so far: F is never below 0, and CP-SAT's own bound starts
        # far below both (a progress line once read "bound -4.287793").
        self.proven = 0.0

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    @property
    def expired(self) -> bool:
        return self.elapsed >= self.options.time_limit

    def offer(self, f: float, bound: float | None = None) -> bool:
        """Record ``f`` if it improves on the best so far; say whether it did. A bound
        is reported as the best offered so far (at least 0)."""
        if bound is not None:
            self.proven = max(self.proven, bound)
            bound = self.proven
        if f >= self.best:
            return False
        self.best = f
        p = Progress(self.elapsed, f, bound)
        self.trajectory.append(p)
        if self.options.on_progress is not None:
            self.options.on_progress(p)
        return True
