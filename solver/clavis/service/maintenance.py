"""clavisd's periodic tasks (advice write, nonce pruning, retention, the internal repack),
each with its own period and its own failure handling.

One task failing (an unwritable advice path, a store error in retention) must never keep
the others from running: each runs in its own ``try``, its failure is logged with its name
and it is tried again one period later, while the others keep their own schedules.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

log = logging.getLogger("clavisd.maintenance")


@dataclass
class Task:
    """One periodic task: ``action`` every ``period_s`` seconds, the first ``first_s`` after
    the loop starts. ``failures`` counts failures in a row (reset by a success)."""

    name: str
    period_s: float
    action: Callable[[], object]
    first_s: float = 0.0
    due: float = field(default=0.0, init=False)
    failures: int = field(default=0, init=False)
    runs: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if not self.period_s > 0:
            raise ValueError(f"task {self.name}: period must be positive, not {self.period_s}")


def run_due(tasks: Sequence[Task], now: float) -> list[str]:
    """Run every task due at ``now`` (monotonic seconds), each on its own; the names of the
    tasks that failed. A task's next turn is one period after this one, failed or not, so
    a failing task is retried at its own pace and never runs in a tight loop."""
    failed = []
    for task in tasks:
        if now < task.due:
            continue
        task.due = now + task.period_s
        task.runs += 1
        try:
            task.action()
        except Exception:  # each task is its own failure domain; logged, never swallowed
            task.failures += 1
            failed.append(task.name)
            log.exception("task=%s failed (%d in a row); next try in %g s",
                          task.name, task.failures, task.period_s)  # fmt: skip
        else:
            if task.failures:
                log.info("task=%s recovered after %d failures", task.name, task.failures)
            task.failures = 0
    return failed


def tick_s(tasks: Sequence[Task]) -> float:
    """How often the loop wakes: often enough for the shortest period, at most 1 s late."""
    return min(1.0, *(t.period_s for t in tasks))


def loop(tasks: Sequence[Task], stop: threading.Event) -> None:
    """Run ``tasks`` until ``stop`` is set; bounded by ``stop`` (each wait is ``tick_s``)."""
    start = time.monotonic()
    for task in tasks:
        task.due = start + task.first_s
    while not stop.wait(tick_s(tasks)):
        run_due(tasks, time.monotonic())
