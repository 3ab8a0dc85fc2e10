"""The bound beside the search (placement/beside.py): a child process that reports its
floor as it goes, is ended at its deadline, says why it failed, and leaves nothing
running; a repack solve that runs its pool bound there proves what the bound proves."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from clavis.instance import Assignment, build_instance
from clavis.objectives import Weights, bounds, violations
from clavis.placement import SolveOptions, beside, cpsat, place, pool
from clavis.realistic import RealisticSpec, generate

pytestmark = pytest.mark.skipif(beside.usable_cores() < 2, reason="needs two usable cores")


def _rising(steps: int, pause: float, *, report: beside.Report) -> None:
    for i in range(steps):
        report(float(i + 1), None)
        time.sleep(pause)
    report(None, (2, 0, 1))


def _failing(*, report: beside.Report) -> None:
    report(0.5, None)
    raise ValueError("no pool for this cluster")


def test_the_child_reports_its_floors_and_rounding_and_ends() -> None:
    aside = beside.Beside(_rising, (3, 0.01), time.monotonic() + 30)
    got = aside.finish()
    assert got.done and not got.error
    assert got.floor == 3.0 and got.rounding == (2, 0, 1)
    assert multiprocessing.active_children() == []


def test_a_child_past_its_deadline_is_ended_and_its_last_floor_kept() -> None:
    start = time.monotonic()
    aside = beside.Beside(_rising, (10_000, 0.02), start + 5.0)
    # Wait (bounded) for its first report: a spawned child (a test run with threads
    # left over) takes a second or two to start.
    for _ in range(500):
        if aside.poll().floor >= 1.0:
            break
        time.sleep(0.01)
    got = aside.finish()
    waited = time.monotonic() - start
    assert not got.done and got.rounding is None
    assert got.floor >= 1.0  # what it reported before it was ended
    assert waited < 5.0 + beside.GRACE_SECONDS + 1.0
    assert multiprocessing.active_children() == []
    assert aside.poll() is got  # read after the end: what was reported, no error


def test_a_failing_child_says_why_and_keeps_what_it_reported() -> None:
    got = beside.Beside(_failing, (), time.monotonic() + 30).finish()
    assert got.done and got.error == "ValueError: no pool for this cluster"
    assert got.floor == 0.5


def test_a_process_with_threads_spawns_the_child_instead_of_forking() -> None:
    # clavisd solves in plan threads: a fork would copy one thread and any lock another
    # held. A spawned child imports the work function anew and still reports.
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        aside = beside.Beside(_rising, (2, 0.0), time.monotonic() + 60)
        assert aside._proc._start_method == "spawn"
        got = aside.finish()
    finally:
        stop.set()
        other.join()
    assert got.done and got.floor == 2.0 and got.rounding == (2, 0, 1)


def test_one_thread_or_one_core_keeps_the_bound_in_the_search() -> None:
    assert not beside.can_run(1)
    assert beside.can_run(2)


def test_a_repack_proves_the_pool_bound_beside_its_search() -> None:
    inst = build_instance(*generate(RealisticSpec(hosts=64, seed=3, current=True)).models())
    w = Weights(6, 5, 9, 4)
    limits = bounds(inst)
    relaxed = pool.prepare(inst, w, limits, stay=False)
    assert relaxed is not None
    proved = pool.solve(relaxed, time.monotonic() + 20).bound
    hint: Assignment = tuple(h for h in inst.current if h is not None)
    for workers in (0, 1):  # beside, then in the search (one thread)
        got = place(
            "cpsat", inst, w, SolveOptions(time_limit=6, seed=0, hint=hint, workers=workers)
        )
        assert got.assignment is not None and got.score is not None and got.bound is not None
        assert not violations(inst, got.assignment)
        assert not any("beside" in note for note in got.notes), got.notes
        assert proved - 1e-6 <= got.bound <= got.score.F + 1e-9
        assert got.seconds <= 6 * 1.05 + 0.5
        assert multiprocessing.active_children() == []


def test_the_child_reports_each_rise_of_the_repack_bound_and_its_rounding() -> None:
    inst = build_instance(*generate(RealisticSpec(hosts=64, seed=3, current=True)).models())
    w = Weights(6, 5, 9, 4)
    limits = bounds(inst)
    heard: list[tuple[float | None, Assignment | None]] = []

    def report(floor: float | None, rounding: Assignment | None) -> None:
        heard.append((floor, rounding))

    floor, rounded = cpsat._pool_bound(
        inst, w, limits=limits, floor=0.0, deadline=time.monotonic() + 30,
        rounding=time.monotonic() + 30, report=report,
    )  # fmt: skip
    floors = [f for f, _ in heard if f is not None]
    assert floors and floors == sorted(floors) and floors[-1] == floor
    assert [r for _, r in heard if r is not None] == [rounded]
    assert rounded is not None and not violations(inst, rounded)
