"""The Deferred-Methods pipeline: buffers flushed when full and at the end of each
sampler's round, sequence numbers that keep the newest value when batches are processed
out of order, and the choice between the idle-priority worker and the sampler's thread."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from clavis_monitor.agent import Agent
from clavis_monitor.config import parse
from clavis_monitor.pipeline import Buffer, IdleWorker, LoadGauge, Sample, State

from .cgroups import CgroupSet


class Recorder:
    """A sink that records each batch with the thread that processed it, and can hold
    the idle worker inside the sink until the test releases it."""

    def __init__(self, state: State | None = None) -> None:
        self.state = state or State()
        self.batches: list[tuple[str, list[Sample]]] = []
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.gate.set()
        self.worker_policy: int | None = None

    def __call__(self, batch: list[Sample]) -> None:
        me = threading.current_thread()
        if me.name == "idle-flush":
            self.worker_policy = os.sched_getscheduler(0)
            self.entered.set()
            assert self.gate.wait(10), "the test never released the worker"
        self.state.apply(batch)
        self.batches.append((me.name, batch))


def gauge(spare: bool) -> LoadGauge:
    g = LoadGauge()
    g.busy_cores = 0.0 if spare else float(g.cores)
    return g


def wait_for(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_full_buffer_is_flushed_and_the_rest_at_the_end_of_the_round() -> None:
    rec = Recorder()
    buf = Buffer("cpu", rec, 3, gauge=gauge(spare=False), worker=None)
    for i in range(7):
        buf.add(f"c{i}", i)
    # two full batches went at once; the seventh sample waits for the round's end
    assert [[s.value for s in b] for _, b in rec.batches] == [[0, 1, 2], [3, 4, 5]]
    buf.flush()
    assert [s.value for s in rec.batches[-1][1]] == [6]
    buf.flush()  # nothing waits: no empty batch
    assert len(rec.batches) == 3 and buf.flushed_inline == 3 and buf.flushed_idle == 0
    seqs = [s.seq for _, b in rec.batches for s in b]
    assert seqs == sorted(seqs) == list(range(1, 8))  # one increasing sequence per buffer
    assert all(name == threading.current_thread().name for name, _ in rec.batches)


def test_the_newest_value_wins_whatever_order_batches_are_processed_in() -> None:
    state = State()
    newer = [Sample(5, "cpu", "c1", "new", 0.0), Sample(6, "cpu", "host", 1.5, 0.0)]
    older = [Sample(2, "cpu", "c1", "old", 0.0), Sample(3, "cpu", "c2", "only", 0.0)]
    state.apply(newer)
    state.apply(older)  # processed late (handed to the worker before `newer`)
    assert {k: s.value for k, s in state.of("cpu").items()} == {
        "c1": "new",
        "host": 1.5,
        "c2": "only",
    }
    state.apply([Sample(7, "perf", "c1", 2.0, 0.0)])
    state.drop("c1")  # a vanished container: every sampler forgets it
    assert state.get("cpu", "c1") is None and state.get("perf", "c1") is None
    assert state.get("cpu", "c2") is not None


def test_spare_cores_hand_the_flush_to_the_idle_worker_and_a_busy_host_flushes_inline() -> None:
    rec = Recorder()
    worker = IdleWorker().start()
    try:
        g = gauge(spare=True)
        buf = Buffer("perf", rec, 100, gauge=g, worker=worker)
        buf.add("c1", 1.0)
        buf.flush()
        wait_for(lambda: worker.batches == 1, "the idle worker")
        assert buf.flushed_idle == 1 and rec.batches[0][0] == "idle-flush"
        assert worker.idle_priority and rec.worker_policy == os.SCHED_IDLE
        g.busy_cores = float(g.cores)  # no spare core: the sampler's own thread flushes
        buf.add("c1", 2.0)
        buf.flush()
        assert buf.flushed_inline == 1 and rec.batches[1][0] == threading.current_thread().name
    finally:
        worker.stop()
    assert not worker.running
    buf.add("c1", 3.0)
    buf.flush()  # a stopped worker is never waited for
    assert buf.flushed_inline == 2 and rec.state.get("perf", "c1").value == 3.0  # type: ignore[union-attr]


def test_a_full_worker_queue_flushes_inline_and_the_late_batch_loses_to_the_newer() -> None:
    rec = Recorder()
    rec.gate.clear()  # the worker stops inside the sink with the first batch
    worker = IdleWorker(max_batches=1).start()
    try:
        buf = Buffer("cpu", rec, 100, gauge=gauge(spare=True), worker=worker)
        buf.add("c1", "first")
        buf.flush()
        assert rec.entered.wait(10)
        buf.add("c1", "second")
        buf.flush()  # queued behind the held batch
        buf.add("c1", "third")
        buf.flush()  # the queue is full: never blocks, flushes in this thread
        assert (buf.flushed_idle, buf.flushed_inline) == (2, 1)
        assert rec.state.get("cpu", "c1").value == "third"  # type: ignore[union-attr]
        rec.gate.set()
        wait_for(lambda: worker.batches == 2, "the held batches")
    finally:
        rec.gate.set()
        worker.stop()
    # processed last, "second" (seq 2) did not overwrite "third" (seq 3)
    assert [b[0].value for _, b in rec.batches] == ["third", "first", "second"]
    assert rec.state.get("cpu", "c1").value == "third"  # type: ignore[union-attr]


def test_load_gauge_counts_busy_cores_from_jiffies() -> None:
    g = LoadGauge()
    g.cores = 4
    assert g.update((100, 1000)) == 0.0  # the first reading only primes
    assert g.update((100 + 300, 1000 + 400)) == pytest.approx(3.0)  # 3 of 4 cores busy
    assert g.spare()
    g.update((400 + 390, 1400 + 400))
    assert g.busy_cores == pytest.approx(3.9) and not g.spare()
    g.update((790, 1800))  # no time passed: the last figure stays
    assert g.busy_cores == pytest.approx(3.9)


@pytest.fixture
def cgroups() -> Iterator[CgroupSet]:
    if os.geteuid() != 0:
        pytest.skip("needs root (cgroups)")
    cs = CgroupSet(["p1", "p2"]).create()
    try:
        yield cs
    finally:
        cs.remove()


def test_the_cpu_sampler_flushes_its_buffer_at_the_end_of_each_round(
    cgroups: CgroupSet, tmp_path: Path
) -> None:
    cfg = parse({
        "host": "h1",
        "containers": {"scan_prefixes": [cgroups.prefix], "lxc_paths": []},
        "traffic": {"backend": "none"},
        "power": {"methods": ["rapl"], "rapl_root": str(tmp_path / "none")},
    })  # fmt: skip
    agent = Agent(cfg, None)  # its worker is not started: every flush is inline
    buf = agent.buffers["cpu"]
    agent.sample_cpu()  # first round: host only (container rates need two readings)
    assert set(agent.state.of("cpu")) == {"host"} and buf._items == []
    time.sleep(0.1)
    agent.sample_cpu()
    # far below the buffer's capacity, yet every sample of the round reached the state
    assert buf.capacity > 3 and buf._items == []
    assert set(agent.state.of("cpu")) == {"host", "p1", "p2"}
    assert buf.flushed_inline == 2 and buf.flushed_idle == 0
    seqs = [agent.state.get("cpu", k).seq for k in ("p1", "p2", "host")]  # type: ignore[union-attr]
    assert seqs == sorted(seqs)  # in the order the round took them
