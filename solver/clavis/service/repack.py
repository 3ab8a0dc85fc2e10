"""Repacking (thesis §5.5.3: re-solve every 60 s) and the plan executor.

``decide``: snapshot → solve with the calibrated weights and M against the current
placement → keep the result only if F improves by more than the margin → ordered plan.
``Executor``: runs a stored plan wave by wave through the migrator agents. Each state
change is committed before the next action, so a restarted clavisd resumes from the
store: a step already done is never sent again, a step whose container already runs on
its target is recorded done without a move, and a step that was in flight is sent again
with the same id, which an agent answers with its status instead of running it twice.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Literal

from clavis.documents import InputError
from clavis.instance import build_instance
from clavis.objectives import Objectives, Weights, bounds, contended_hosts, score, violations
from clavis.placement import SolveOptions, place
from clavis.placement.guard import default_memory_budget
from clavis.placement.result import PlacementResult
from clavis.service.agents import AgentProtocolError, AgentUnavailableError, MigratorClient
from clavis.service.config import RepackConfig
from clavis.service.pausepoints import pause_point
from clavis.service.plan import Move, Plan, Step, moves_between, order, peak_loads
from clavis.service.powercycle import cycle_cost
from clavis.service.snapshot import Snapshot
from clavis.service.store import Store
from clavis_contracts import TERMINAL_STATES, MigrationStep

log = logging.getLogger("clavisd.repack")


@dataclass(frozen=True)
class Decision:
    """``f_target`` is the F of the placement the plan's steps reach: the solver's target
    when nothing is deferred, else the current placement with only the planned steps
    applied (``f_solver`` keeps the solver's). ``deferred``: the plan's moves were
    ordered, but those that can run reach no more than the margin (none at all, or not
    enough of them): nothing is stored or started, and ``plan`` names the deferred moves."""

    decision: Literal["no-change", "below-margin", "planned", "deferred", "no-solution"]
    f_current: float | None
    f_target: float | None
    message: str
    plan: Plan | None
    contended: tuple[str, ...] = ()
    f_solver: float | None = None
    # raw P, D, C, M (units of report.UNITS) of the current placement and of the one the
    # plan's steps reach, so an admin sees what a plan trades, not only F
    raw_current: Objectives | None = None
    raw_target: Objectives | None = None
    raw_solver: Objectives | None = None
    # What the solver was asked and answered, for the plan's replay record (replay.py)
    solved: PlacementResult | None = None
    options: SolveOptions | None = None


def solve_options(cfg: RepackConfig, current: tuple[int, ...]) -> SolveOptions:
    """What a repack asks of the solver, every value resolved (threads, memory budget) so
    that the replay record states exactly what the solve was given."""
    workers = cfg.workers or SolveOptions(workers=0).threads
    return SolveOptions(time_limit=cfg.time_limit_s, seed=cfg.seed, workers=workers,
                        hint=current, deterministic=cfg.deterministic,
                        memory_limit=default_memory_budget())  # fmt: skip


def _cycles_note(cycles: float, emptied: list[str]) -> str:
    """The power cycles' share of the bar a plan must pass (powercycle.py), if any."""
    if cycles <= 0:
        return ""
    names = ", ".join(emptied[:5]) + (f" and {len(emptied) - 5} more" if len(emptied) > 5 else "")
    return (f" plus {cycles:.4f} for the power cycles of the {len(emptied)} hosts it would "
            f"empty ({names}; repack.power_cycle_s)")  # fmt: skip


def describe_moves(moves: tuple[Move, ...], limit: int = 5) -> str:
    """``c1 h1->h2, c2 h2->h1`` (at most ``limit``, then how many more)."""
    text = ", ".join(f"{m.container} {m.source}->{m.target}" for m in moves[:limit])
    return text + (f" and {len(moves) - limit} more" if len(moves) > limit else "")


def decide(snap: Snapshot, weights: Weights, cfg: RepackConfig) -> Decision:
    if snap.workload is None:
        return Decision("no-change", None, None, "no container has reported yet", None)
    try:
        inst = build_instance(snap.cluster, snap.workload, snap.current, "current placement")
    except InputError as exc:
        return Decision("no-solution", None, None, str(exc), None)
    current = tuple(h for h in inst.current if h is not None)
    now_score = score(inst, current, weights)
    options = solve_options(cfg, current)
    result = place(cfg.method, inst, weights, options)
    if result.assignment is None or result.score is None:
        return Decision("no-solution", now_score.F, None, f"solver: {result.status}", None)
    problems = violations(inst, result.assignment)
    if problems:  # every solver answer is re-checked before it becomes a plan
        return Decision("no-solution", now_score.F, None, "; ".join(problems), None)
    gain = now_score.F - result.score.F
    limits = bounds(inst)
    cycles, emptied = cycle_cost(inst, current, result.assignment, weights, limits,
                                 power_cycle_s=cfg.power_cycle_s,
                                 power_horizon_s=cfg.power_horizon_s)  # fmt: skip
    if gain <= cfg.margin + cycles:
        return Decision("below-margin", now_score.F, result.score.F,
                        f"F would improve by {gain:.4f} ({now_score.F:.4f} -> "
                        f"{result.score.F:.4f}), not more than repack.margin {cfg.margin:g}"
                        + _cycles_note(cycles, emptied) + ": nothing planned", None)  # fmt: skip
    names = [c.name for c in inst.containers]
    target = {n: inst.hosts[h].name for n, h in zip(names, result.assignment, strict=True)}
    cores = {c.name: c.cores for c in inst.containers}
    memory = {c.name: c.memory_bytes for c in inst.containers}
    now_where = dict(snap.current.assignment)
    capacity = {h.name: h.cores for h in inst.hosts}
    up = {h.name for h in inst.hosts if h.state == "up"}
    plan = order(
        moves_between(now_where, target, cores, memory),
        capacity=capacity,
        current=now_where,
        cores=cores,
        parallelism=cfg.parallelism,
        staging_hosts=up,
    )
    peaks = peak_loads(plan, capacity, now_where, cores)
    over = [h for h, v in peaks.items() if v > capacity[h]]
    if over:
        return Decision("no-solution", now_score.F, result.score.F,
                        f"plan would overload {over}", None)  # fmt: skip
    hot = tuple(inst.hosts[h].name for h in sorted(contended_hosts(inst, current)))
    solver_f = result.score.F
    reached_f = solver_f
    reached_raw = result.score.raw
    deferred = ""
    if plan.deferred:
        # Deferred moves are not made: what the plan reaches is the current placement with
        # its steps applied, and that is what F after and the margin are measured on.
        where = dict(now_where)
        for step in plan.steps:
            where[step.move.container] = step.move.target
        index = {h.name: i for i, h in enumerate(inst.hosts)}
        reached = score(inst, tuple(index[where[c.name]] for c in inst.containers), weights)
        reached_f, reached_raw = reached.F, reached.raw
        deferred = (f"; {len(plan.deferred)} moves deferred (no host has room to stage them; "
                    f"those containers stay): {describe_moves(plan.deferred)}")  # fmt: skip
        placed = tuple(index[where[c.name]] for c in inst.containers)
        cycles, emptied = cycle_cost(inst, current, placed, weights, limits,
                                     power_cycle_s=cfg.power_cycle_s,
                                     power_horizon_s=cfg.power_horizon_s)  # fmt: skip
        if now_score.F - reached_f <= cfg.margin + cycles:
            return Decision("deferred", now_score.F, reached_f,
                            f"the solver's placement (F {now_score.F:.4f} -> {solver_f:.4f}) "
                            f"needs moves that cannot be ordered now; the {len(plan.steps)} "
                            f"steps that can would reach F {reached_f:.4f}, not more than "
                            f"repack.margin {cfg.margin:g}{_cycles_note(cycles, emptied)} "
                            f"better: nothing planned{deferred}",
                            plan, hot, solver_f, now_score.raw, reached_raw,
                            result.score.raw, result, options)  # fmt: skip
    return Decision("planned", now_score.F, reached_f,
                    f"F {now_score.F:.4f} -> {reached_f:.4f} ({result.method} "
                    f"{result.status}); {len(plan.steps)} steps in {plan.waves} waves"
                    + deferred, plan, hot, solver_f, now_score.raw, reached_raw,
                            result.score.raw, result, options)  # fmt: skip


class Executor:
    """Runs one plan to its end in a thread; ``start`` dispatches the first wave itself so
    the caller learns at once when no agent answers."""

    def __init__(self, store: Store, client: MigratorClient, cfg: RepackConfig) -> None:
        self.store = store
        self.client = client
        self.cfg = cfg
        self._threads: dict[int, threading.Thread] = {}
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()
        for th in self._threads.values():
            th.join(timeout=5)

    def busy(self) -> bool:
        return any(th.is_alive() for th in self._threads.values())

    def start(self, plan_id: int) -> None:
        """Dispatch what can start now; on success continue in the background."""
        p = self.store.plan(plan_id)
        if p is None or p.state in ("done", "failed", "superseded"):
            raise ValueError(f"plan {plan_id} is {p.state if p else 'unknown'}; nothing to apply")
        if self.busy():
            raise ValueError("another plan is running")
        try:
            finished = self._advance(plan_id)
        except AgentUnavailableError as exc:
            self.store.set_plan(plan_id, "pending", f"{exc}; plan left pending", time.time())
            return
        if not finished:
            th = threading.Thread(target=self._run, args=(plan_id,), name=f"plan-{plan_id}",
                                  daemon=True)  # fmt: skip
            self._threads[plan_id] = th
            th.start()

    def _run(self, plan_id: int) -> None:
        deadline = time.monotonic() + self.cfg.step_deadline_s * (
            1 + len(self.store.steps(plan_id))
        )
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                if self._advance(plan_id):
                    return
            except AgentUnavailableError as exc:
                log.warning("plan=%d agent unavailable: %s; retrying", plan_id, exc)
            self._stop.wait(self.cfg.poll_s)
        if not self._stop.is_set():
            self.store.set_plan(plan_id, "failed", "plan deadline passed", time.time())

    def _advance(self, plan_id: int) -> bool:
        """One pass: poll in-flight steps, dispatch the current wave. True when finished."""
        steps = self.store.steps(plan_id)
        open_waves = sorted({s.step.wave for s in steps if s.state not in TERMINAL_STATES})
        if any(s.state in ("failed", "rolled_back") for s in steps):
            self.store.set_plan(plan_id, "failed", "a step failed; its container stayed on its "
                                "source; later steps not run", time.time())  # fmt: skip
            return True
        if not open_waves:
            plan = self.store.plan(plan_id)
            left = len(plan.summary.get("deferred", [])) if plan is not None else 0
            note = f"; {left} moves deferred, not run" if left else ""
            self.store.set_plan(plan_id, "done", f"{len(steps)} steps done{note}", time.time())
            return True
        plan = self.store.plan(plan_id)
        if plan is not None and plan.state == "pending":
            self.store.set_plan(plan_id, "running", "", time.time())
        where = {c.name: c.host for c in self.store.containers()}
        for stored in (st for st in steps if st.step.wave == open_waves[0]):
            now = time.time()
            s, m = stored.step, stored.step.move
            if stored.state in TERMINAL_STATES:
                continue
            if stored.state == "pending" and where.get(m.container) == m.target:
                self.store.set_step(plan_id, s.index, "done", "container already on target", now)
                continue
            step = self.migration_step(plan_id, s)
            if stored.state == "pending":
                # Record the dispatch before sending: after a crash the step is re-sent
                # with the same id, never forgotten.
                self.store.set_step(
                    plan_id, s.index, "dispatched", "sent to agent", now, dispatched=True
                )
                pause_point("step-dispatched")
            try:
                if stored.state in ("pending", "dispatched"):
                    status = self.client.send(step)
                else:
                    status = self.client.status(m.source, step.step_id)
            except AgentUnavailableError:
                if stored.state == "pending":
                    self.store.set_step(plan_id, s.index, "pending", "agent unavailable",
                                        time.time())  # fmt: skip
                raise
            except AgentProtocolError as exc:
                self.store.set_step(plan_id, s.index, "failed", str(exc), time.time())
                continue
            if status.state != stored.state:
                self.store.set_step(plan_id, s.index, status.state, status.message, time.time())
        return False

    def migration_step(self, plan_id: int, s: Step) -> MigrationStep:
        """A plan's step as the agents' contract carries it (the one place it is made)."""
        m = s.move
        return MigrationStep(
            step_id=f"{plan_id}:{s.index}", plan=plan_id, index=s.index, wave=s.wave,
            container=m.container, source=m.source, target=m.target,
            target_address=self.client.address(m.target), memory_bytes=m.memory_bytes,
            cores=m.cores, deadline_s=self.cfg.step_deadline_s,
        )  # fmt: skip

    def resume(self) -> list[int]:
        """After a restart: continue every plan that was running."""
        running = [p.id for p in self.store.plans(["running"])]
        for plan_id in running:
            th = threading.Thread(target=self._run, args=(plan_id,), name=f"plan-{plan_id}",
                                  daemon=True)  # fmt: skip
            self._threads[plan_id] = th
            th.start()
        return running
