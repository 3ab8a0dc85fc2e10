"""Batched sample pipeline after Deferred Methods (Ansaloni, Binder, Heydarnoori, Chen,
"Exploiting Under-Utilized Cores with Deferred Methods", USI-INF-TR-2010-7; digest in
papers/digest-002.md). Samplers do not handle each sample where it is taken: they append
it to a per-sampler buffer (§3), and a whole buffer is processed at once when it is full
(§3) or, our addition, when its interval ends. Processing follows the paper's adaptive
processor AP (§4.3): a bounded queue to a consumer at minimum priority (here a real
SCHED_IDLE thread, which Linux honours, unlike Java priorities: digest §2.6) that never
blocks the producer: when it is full, the sampler processes its own buffer (SP, §4.1).
Beyond AP, which adapts only implicitly, the sampler also processes inline when the host
has no spare core by /proc/stat, so no hand-over is paid when the idle thread could not
run soon anyway. Every sample carries a sequence number; the state keeps, per key, only
the newest, so a buffer processed late (AP may reorder, §4.3) never overwrites a fresher
one.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Sample:
    seq: int
    sampler: str
    key: str  # what the value is about (a container, "host", ...)
    value: Any
    t: float  # monotonic time taken


Sink = Callable[[list[Sample]], None]


class LoadGauge:
    """Spare cores of the host, from /proc/stat deltas at each ``update``."""

    def __init__(self) -> None:
        self.cores = os.cpu_count() or 1
        self.busy_cores = 0.0
        self._last: tuple[int, int] | None = None

    def update(self, busy_total: tuple[int, int]) -> float:
        """Feed (busy, total) jiffies; returns the mean busy cores since the last call."""
        if self._last is not None:
            d_busy = busy_total[0] - self._last[0]
            d_total = busy_total[1] - self._last[1]
            if d_total > 0:
                self.busy_cores = self.cores * d_busy / d_total
        self._last = busy_total
        return self.busy_cores

    def spare(self) -> bool:
        return self.cores - self.busy_cores >= 1.0


class IdleWorker:
    """One thread at SCHED_IDLE running handed-over flushes in order."""

    def __init__(self, max_batches: int = 64) -> None:
        self._q: queue.Queue[tuple[Sink, list[Sample]] | None] = queue.Queue(max_batches)
        self._thread = threading.Thread(target=self._run, name="idle-flush", daemon=True)
        self.idle_priority = False
        self.batches = 0

    def start(self) -> IdleWorker:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:  # Linux applies this to the calling thread only
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            self.idle_priority = True
        except (OSError, AttributeError):
            self.idle_priority = False
        while True:
            item = self._q.get()
            if item is None:
                return
            sink, batch = item
            sink(batch)
            self.batches += 1

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def submit(self, sink: Sink, batch: list[Sample]) -> bool:
        """Queue a flush; False when the queue is full (the caller flushes inline)."""
        try:
            self._q.put_nowait((sink, batch))
        except queue.Full:
            return False
        return True

    def stop(self) -> None:
        if self._thread.is_alive():
            self._q.put(None)
            self._thread.join(timeout=5)


class Buffer:
    """One sampler's buffer, used by that sampler's thread only: flushed when
    ``capacity`` samples wait, and by the sampler at the end of each interval's round."""

    def __init__(
        self, name: str, sink: Sink, capacity: int, *, gauge: LoadGauge, worker: IdleWorker | None
    ) -> None:
        self.name, self.sink, self.capacity = name, sink, capacity
        self.gauge, self.worker = gauge, worker
        self._items: list[Sample] = []
        self._seq = 0
        self.flushed_inline = 0
        self.flushed_idle = 0

    def add(self, key: str, value: Any) -> None:
        self._seq += 1
        self._items.append(Sample(self._seq, self.name, key, value, time.monotonic()))
        if len(self._items) >= self.capacity:
            self.flush()

    def flush(self) -> None:
        batch, self._items = self._items, []
        if not batch:
            return
        w = self.worker
        if w is not None and w.running and self.gauge.spare() and w.submit(self.sink, batch):
            self.flushed_idle += 1
            return
        self.sink(batch)
        self.flushed_inline += 1


class State:
    """The newest value per (sampler, key), by sequence number; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[str, str], Sample] = {}

    def apply(self, batch: list[Sample]) -> None:
        with self._lock:
            for s in batch:
                cur = self._values.get((s.sampler, s.key))
                if cur is None or s.seq > cur.seq:
                    self._values[(s.sampler, s.key)] = s

    def get(self, sampler: str, key: str) -> Sample | None:
        with self._lock:
            return self._values.get((sampler, key))

    def of(self, sampler: str) -> dict[str, Sample]:
        with self._lock:
            return {k: s for (name, k), s in self._values.items() if name == sampler}

    def drop(self, key: str) -> None:
        """Forget every sampler's value about ``key`` (a container that vanished)."""
        with self._lock:
            for k in [k for k in self._values if k[1] == key]:
                del self._values[k]
