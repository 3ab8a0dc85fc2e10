"""Pareto fronts of the live cluster, computed inside clavisd for the admin's UI (issue 16;
thesis §5.5.1, stage 1: NSGA-II on the cluster as it runs now).

One run at a time (a second start is refused as busy): it snapshots the store as the
solver's documents (``snapshot.take``, the same view repacking uses), runs the ask-and-tell
loop of ``clavis.pareto`` in a background thread, records every generation's progress
(generation, evaluations, hypervolume of the archive, front size) for streaming, stops at
the next generation when cancelled, and stores the archive as a front, the same document
`clavis pareto` writes, so picks and calibration treat both alike.

Runs are kept in memory: a run in progress when clavisd stops is lost (its front is not
stored); finished fronts are in the store.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from clavis.documents import InputError
from clavis.instance import build_instance
from clavis.model import Front, Placement
from clavis.pareto import (
    Generation,
    PlacementProblem,
    make_algorithm,
    pareto_front,
    seed_placements,
)
from clavis.pareto_document import front_document
from clavis.service.snapshot import Snapshot
from clavis.service.store import Store

log = logging.getLogger("clavisd.fronts")

RunState = Literal["running", "done", "failed", "cancelled"]
KEEP_RUNS = 50  # finished runs remembered for the UI's list (the fronts stay in the store)


class FrontRunSettings(BaseModel):
    """The search's settings (`clavis pareto`'s options); bounded so one run cannot hold
    the head node's CPU for long: population × generations is at most 200,000 evaluations."""

    model_config = ConfigDict(extra="forbid")
    algorithm: Literal["nsga2", "nsga3", "smsemoa"] = "nsga2"
    population: int = Field(default=60, ge=4, le=400)
    generations: int = Field(default=100, ge=1, le=2000)
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    seed_time: float = Field(
        default=0.5, ge=0, le=10, description="CP-SAT budget per seeding solve, seconds."
    )
    with_migration: bool = Field(
        default=False, description="Add M (migration from the current placement) as a 4th axis."
    )
    from_front: int | None = Field(
        default=None,
        ge=1,
        le=2**62,
        description="Search the cluster, workload and current placement of this stored front "
        "(e.g. a representative workload's, from `clavis pareto`) instead of the live cluster.",
    )


class RunBusyError(Exception):
    """Another run is in progress; the message names it."""


class NoSuchFrontError(LookupError):
    """``from_front`` names no stored front."""


def front_source(store: Store, front_id: int) -> Snapshot:
    """A stored front's inputs as the run's snapshot: its cluster, workload and current
    placement (none for a front computed without one)."""
    row = store.front(front_id)
    if row is None:
        raise NoSuchFrontError(f"no front {front_id}")
    front = Front.model_validate_json(row.doc)
    return Snapshot(front.cluster, front.workload, front.current or Placement(assignment={}))


@dataclass
class FrontRun:
    """One run and what the stream needs; mutated only under the runner's condition."""

    id: int
    user: str
    settings: FrontRunSettings
    started: float
    state: RunState = "running"
    finished: float | None = None
    progress: list[Generation] = field(default_factory=list)
    front_id: int | None = None
    message: str = ""
    cancel: threading.Event = field(default_factory=threading.Event)


def store_front(store: Store, front: Front, now: float) -> int:
    """Insert a front document as POST /fronts does; its id."""
    return store.add_front(front.model_dump_json(by_alias=True), now)


def sha256_of(front: Front) -> str:
    return hashlib.sha256(front.model_dump_json(by_alias=True).encode()).hexdigest()


class FrontRunner:
    """Starts, tracks and cancels the one background run; thread-safe."""

    def __init__(self, store: Store, snapshot: Callable[[float], Snapshot]) -> None:
        self._store = store
        self._snapshot = snapshot
        self.changed = threading.Condition()  # notified on every progress or state change
        self._runs: dict[int, FrontRun] = {}
        self._next_id = 1
        self._thread: threading.Thread | None = None

    def runs(self) -> list[FrontRun]:
        with self.changed:
            return sorted(self._runs.values(), key=lambda r: r.id)

    def get(self, run_id: int) -> FrontRun | None:
        with self.changed:
            return self._runs.get(run_id)

    def current(self) -> FrontRun | None:
        with self.changed:
            return next((r for r in self._runs.values() if r.state == "running"), None)

    def start(self, settings: FrontRunSettings, user: str, now: float) -> FrontRun:
        """Snapshot the cluster (or read a stored front's inputs) and start the search in a
        thread. RunBusyError when a run is in progress; NoSuchFrontError for an unknown
        ``from_front``; InputError when there is nothing to place."""
        with self.changed:
            busy = self.current()
            if busy is not None:
                raise RunBusyError(f"front run {busy.id} is in progress (started by "
                                   f"{busy.user}); cancel it or wait for it")  # fmt: skip
            if settings.from_front is not None:
                snap = front_source(self._store, settings.from_front)
            else:
                snap = self._snapshot(now)
            if snap.workload is None:
                raise InputError("no container has reported yet: the cluster has nothing to place")
            if settings.with_migration and not snap.current.assignment:
                raise InputError("with_migration needs a current placement")
            current = snap.current if snap.current.assignment else None
            inst = build_instance(snap.cluster, snap.workload, current, "current placement")
            run = FrontRun(id=self._next_id, user=user, settings=settings, started=now)
            self._next_id += 1
            self._runs[run.id] = run
            finished = sorted(r.id for r in self._runs.values() if r.state != "running")
            for old in finished[: max(0, len(finished) - KEEP_RUNS)]:
                del self._runs[old]
            problem = PlacementProblem(inst, with_migration=settings.with_migration)
            self._thread = threading.Thread(
                target=self._run, args=(run, snap, problem), name=f"front-run-{run.id}",
                daemon=True,
            )  # fmt: skip
            self._thread.start()
            return run

    def cancel(self, run_id: int) -> FrontRun:
        """Ask a running run to stop after its current generation; KeyError if unknown,
        RunBusyError's sibling ValueError when it is not running."""
        with self.changed:
            run = self._runs[run_id]
            if run.state != "running":
                raise ValueError(f"front run {run_id} is {run.state}, not running")
            run.cancel.set()
            run.message = "cancelling after the current generation"
            self.changed.notify_all()
            return run

    def wait_idle(self, timeout: float) -> bool:
        """For shutdown and tests: wait until no run is in progress."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def stop(self, timeout: float = 10.0) -> None:
        with self.changed:
            for run in self._runs.values():
                run.cancel.set()
        self.wait_idle(timeout)

    # --- the thread ---------------------------------------------------------------------

    def _on_generation(self, run: FrontRun, g: Generation) -> bool:
        with self.changed:
            run.progress.append(g)
            self.changed.notify_all()
        return not run.cancel.is_set()

    def _finish(self, run: FrontRun, state: RunState, message: str, front_id: int | None) -> None:
        with self.changed:
            run.state, run.message, run.front_id = state, message, front_id
            run.finished = time.time()
            self.changed.notify_all()
        log.info("front run %d %s: %s", run.id, state, message)

    def _run(self, run: FrontRun, snap: Snapshot, problem: PlacementProblem) -> None:
        s = run.settings
        start = time.monotonic()
        try:
            seeds = seed_placements(problem.inst, s.seed, s.seed_time, s.with_migration)
            algo = make_algorithm(s.algorithm, s.population, seeds, problem.n_obj)
            result = pareto_front(problem, algo, s.generations, s.seed,
                                  lambda g: self._on_generation(run, g))  # fmt: skip
            if run.cancel.is_set():
                self._finish(run, "cancelled", f"cancelled after {result.generations} "
                             "generations; no front stored", None)  # fmt: skip
                return
            assert snap.workload is not None  # start() refused a snapshot without one
            front = front_document(
                problem, result, cluster=snap.cluster, workload=snap.workload,
                current=snap.current if snap.current.assignment else None,
                algorithm=s.algorithm, population=s.population,
                seed=s.seed, seed_time=s.seed_time, seconds=time.monotonic() - start,
            )  # fmt: skip
            if front is None:
                self._finish(run, "failed", "no feasible placement found", None)
                return
            fid = store_front(self._store, front, time.time())
            self._finish(run, "done", f"{len(front.points)} schedules, hypervolume "
                         f"{result.hypervolume:.5f}", fid)  # fmt: skip
        except Exception as exc:  # the run fails visibly; clavisd goes on
            log.exception("front run %d failed", run.id)
            self._finish(run, "failed", f"{type(exc).__name__}: {exc}", None)
