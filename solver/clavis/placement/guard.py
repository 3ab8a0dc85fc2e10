"""Deadlines and a memory budget that every turn of a solve checks (issue 12).

A solve gets one :class:`Guard`: the wall-clock instant its answer is due and the most
resident memory the process may use. Model builders call ``guard.check()`` inside their
loops, so a build that would not finish in time (or would not fit) stops instead of
running on; a watchdog thread stops CP-SAT's search (presolve included) on the same
terms. The builders read the clock and /proc only through the guard they are given.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

from ortools.sat.python import cp_model

GIB = 2**30
# Default budget: 8 GiB (the 16,384-host target), or 3/4 of the machine if smaller.
DEFAULT_MEMORY_CAP = 8 * GIB
# Reading /proc costs microseconds; builders call check() per variable, so RSS is read at
# most this often.
RSS_EVERY_S = 0.05
WATCH_EVERY_S = 0.05  # how often the watchdog looks at the clock and RSS during a solve


class LimitReachedError(Exception):
    """A turn ran out of time or memory; the caller keeps the best answer it has."""


class OutOfTimeError(LimitReachedError):
    pass


class OutOfMemoryError(LimitReachedError):
    pass


def rss_bytes() -> int:
    """Resident set size of this process now (Linux /proc/self/statm; 0 if unreadable)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            resident = int(fh.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return resident * os.sysconf("SC_PAGE_SIZE")


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        return DEFAULT_MEMORY_CAP


def default_memory_budget() -> int:
    return min(DEFAULT_MEMORY_CAP, physical_memory() * 3 // 4)


@dataclass
class Guard:
    """When the answer is due (``time.monotonic()`` seconds) and how much RSS is allowed."""

    due: float
    memory_bytes: int
    clock: Callable[[], float] = time.monotonic
    rss: Callable[[], int] = rss_bytes
    _rss_read_at: float = field(default=float("-inf"), repr=False)
    _rss_last: int = field(default=0, repr=False)

    @classmethod
    def after(cls, seconds: float, memory_bytes: int | None = None) -> Guard:
        return cls(time.monotonic() + seconds, memory_bytes or default_memory_budget())

    def left(self) -> float:
        return self.due - self.clock()

    @property
    def expired(self) -> bool:
        return self.clock() >= self.due

    def resident(self) -> int:
        now = self.clock()
        if now - self._rss_read_at >= RSS_EVERY_S:
            self._rss_read_at, self._rss_last = now, self.rss()
        return self._rss_last

    def memory_left(self) -> int:
        return self.memory_bytes - self.resident()

    def check(self) -> None:
        """Raise OutOfTimeError past the deadline, OutOfMemoryError above the budget."""
        if self.clock() >= self.due:
            raise OutOfTimeError("deadline reached")
        used = self.resident()
        if used > self.memory_bytes:
            raise OutOfMemoryError(
                f"resident memory {used / GIB:.2f} GiB is above the budget of "
                f"{self.memory_bytes / GIB:.2f} GiB"
            )

    def until(self, seconds_left: float) -> Guard:
        """The same budget with an earlier deadline: ``seconds_left`` before this one."""
        return Guard(self.due - seconds_left, self.memory_bytes, self.clock, self.rss)

    def share(self, fraction: float) -> Guard:
        """A deadline ``fraction`` of the way from now to this one."""
        now = self.clock()
        return Guard(
            now + max(0.0, self.due - now) * fraction, self.memory_bytes, self.clock, self.rss
        )


class Watchdog:
    """Stops a CP-SAT search when its guard trips (deadline or memory), presolve included.

    CP-SAT's own time limit is set too, but loading and presolving a large model can
    overrun it; ``stop_search`` is honoured at every point where CP-SAT checks its limit.
    """

    def __init__(self, solver: cp_model.CpSolver, guard: Guard) -> None:
        self.solver = solver
        self.guard = guard
        self.reason: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._done.set()
        self._thread.join(timeout=1.0)

    def _watch(self) -> None:
        while not self._done.wait(WATCH_EVERY_S):
            try:
                self.guard.check()
            except LimitReachedError as why:
                self.reason = str(why)
                self.solver.stop_search()
                return
