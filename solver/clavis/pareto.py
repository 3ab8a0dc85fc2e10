"""Pareto fronts of placements with pymoo (thesis §5.5.1, stage 1: NSGA-II).

The decision vector X holds one host index per container. Objectives are the evaluator's
normalised P, D, C (and M when asked), all minimised; the thesis's "maximise diversified
intensity" is our "minimise contention D". Capacity is kept by a repair operator, so
every individual the algorithm sees is a valid placement; G reports any overload the
repair could not remove (only when the cluster is too small for the workload).

Operators follow pymoo's pattern: one small class each, randomness only from the
``random_state`` pymoo injects, so a seed fixes the front.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from pymoo.algorithms.moo.nsga2 import NSGA2
from pymoo.algorithms.moo.nsga3 import NSGA3
from pymoo.algorithms.moo.sms import SMSEMOA
from pymoo.core.algorithm import Algorithm
from pymoo.core.crossover import Crossover
from pymoo.core.mutation import Mutation
from pymoo.core.population import Population
from pymoo.core.problem import Problem
from pymoo.core.repair import Repair
from pymoo.core.sampling import Sampling
from pymoo.indicators.hv import HV
from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting
from pymoo.util.ref_dirs import get_reference_directions

from clavis.instance import Assignment, Instance
from clavis.objectives import Bounds, Objectives, Weights, bounds, evaluate
from clavis.placement import cpsat
from clavis.placement.baselines import corerr, noderr
from clavis.placement.exact import feasible_assignments
from clavis.placement.result import SolveOptions

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
ALGORITHMS = ("nsga2", "nsga3", "smsemoa")
HV_REFERENCE = 1.1  # every normalised objective lies in [0, 1]; 1.1 counts the edges too


class PlacementProblem(Problem):  # type: ignore[misc]  # pymoo ships no type hints
    """Container -> host assignments scored by the one evaluator."""

    def __init__(self, inst: Instance, with_migration: bool = False) -> None:
        self.inst = inst
        self.limits: Bounds = bounds(inst)
        self.names = ("P", "D", "C", "M") if with_migration else ("P", "D", "C")
        self.cores = np.array([c.cores for c in inst.containers], dtype=np.int64)
        self.capacity = np.array([h.cores for h in inst.hosts], dtype=np.int64)
        super().__init__(
            n_var=len(inst.containers),
            n_obj=len(self.names),
            n_ieq_constr=1,
            xl=0,
            xu=len(inst.hosts) - 1,
            vtype=int,
        )

    def objectives(self, assignment: Assignment) -> tuple[Objectives, Objectives]:
        raw = evaluate(self.inst, assignment)
        return raw, self.limits.normalise(raw)

    def _evaluate(self, X: IntArray, out: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        F = np.empty((len(X), self.n_obj))
        G = np.empty((len(X), 1))
        for k, row in enumerate(X):
            _, norm = self.objectives(tuple(int(h) for h in row))
            F[k] = [getattr(norm, n) for n in self.names]
            load = np.bincount(row, weights=self.cores, minlength=len(self.capacity))
            G[k, 0] = float(np.max(load - self.capacity))
        out["F"] = F
        out["G"] = G


class SeededSampling(Sampling):  # type: ignore[misc]
    """Known placements first (CoreRR, NodeRR, CP-SAT answers), then random rows."""

    def __init__(self, seeds: Sequence[Assignment]) -> None:
        super().__init__()
        self.seeds = [np.asarray(s, dtype=np.int64) for s in seeds]

    def _do(
        self,
        problem: PlacementProblem,
        n_samples: int,
        *args: Any,
        random_state: np.random.Generator,
        **kwargs: Any,
    ) -> IntArray:
        X = random_state.integers(0, len(problem.inst.hosts), size=(n_samples, problem.n_var))
        for k, s in enumerate(self.seeds[:n_samples]):
            X[k] = s
        return X


class UniformAssignmentCrossover(Crossover):  # type: ignore[misc]
    """Each container takes its host from one parent or the other; repair fixes capacity."""

    def __init__(self) -> None:
        super().__init__(n_parents=2, n_offsprings=2)

    def _do(
        self,
        problem: PlacementProblem,
        X: IntArray,
        *args: Any,
        random_state: np.random.Generator,
        **kwargs: Any,
    ) -> IntArray:
        _, n_matings, n_var = X.shape
        mask = random_state.random((n_matings, n_var)) < 0.5
        a, b = X[0], X[1]
        return np.stack([np.where(mask, a, b), np.where(mask, b, a)])


class MoveSwapMutation(Mutation):  # type: ignore[misc]
    """Move one container to another host, or swap the hosts of two containers."""

    def __init__(self, prob: float = 0.9, swap_share: float = 0.5) -> None:
        super().__init__(prob=prob)
        self.swap_share = swap_share

    def _do(
        self,
        problem: PlacementProblem,
        X: IntArray,
        *args: Any,
        random_state: np.random.Generator,
        **kwargs: Any,
    ) -> IntArray:
        X = X.copy()
        n_hosts = len(problem.inst.hosts)
        for row in X:
            for _ in range(int(random_state.geometric(0.5))):  # 1 op, sometimes more
                i = int(random_state.integers(problem.n_var))
                if problem.n_var > 1 and random_state.random() < self.swap_share:
                    j = int(random_state.integers(problem.n_var))
                    row[i], row[j] = row[j], row[i]
                else:
                    row[i] = random_state.integers(n_hosts)
        return X


class CapacityRepair(Repair):  # type: ignore[misc]
    """Evict containers from overloaded or forbidden hosts onto hosts with room."""

    def _do(
        self,
        problem: PlacementProblem,
        X: IntArray,
        random_state: np.random.Generator | None = None,
        **kwargs: Any,
    ) -> IntArray:
        rng = random_state if random_state is not None else np.random.default_rng(0)
        X = np.asarray(X, dtype=np.int64).copy()
        for row in X:
            repair_row(problem.inst, row, rng)
        return X


def repair_row(inst: Instance, row: IntArray, rng: np.random.Generator) -> None:
    """In place: keep containers where they fit, re-place the rest at random where they fit."""
    free = np.array([h.cores for h in inst.hosts], dtype=np.int64)
    evicted = []
    for i in rng.permutation(len(row)):
        h, need = int(row[i]), inst.containers[i].cores
        if inst.allowed(int(i), h) and free[h] >= need:
            free[h] -= need
        else:
            evicted.append(int(i))
    for i in evicted:
        need = inst.containers[i].cores
        room = [h for h in np.flatnonzero(free >= need) if inst.allowed(i, int(h))]
        if room:  # else it stays put and G reports the overload
            h = int(room[int(rng.integers(len(room)))])
            row[i] = h
            free[h] -= need


def make_algorithm(name: str, pop_size: int, seeds: Sequence[Assignment], n_obj: int) -> Algorithm:
    common: dict[str, Any] = {
        "sampling": SeededSampling(seeds),
        "crossover": UniformAssignmentCrossover(),
        "mutation": MoveSwapMutation(),
        "repair": CapacityRepair(),
        "eliminate_duplicates": True,
    }
    if name == "nsga2":
        return NSGA2(pop_size=pop_size, **common)
    if name == "nsga3":
        dirs = get_reference_directions("energy", n_obj, pop_size, seed=1)
        return NSGA3(ref_dirs=dirs, pop_size=pop_size, **common)
    if name == "smsemoa":
        return SMSEMOA(pop_size=pop_size, **common)
    raise ValueError(f"unknown algorithm {name!r}; choose one of {', '.join(ALGORITHMS)}")


@dataclass(frozen=True)
class Generation:
    number: int
    evaluations: int
    hypervolume: float
    front_size: int


@dataclass(frozen=True)
class FrontResult:
    X: IntArray  # non-dominated assignments, one row each, distinct objective vectors
    F: FloatArray  # their normalised objectives
    hypervolume: float
    generations: int
    evaluations: int


def seed_placements(
    inst: Instance, seed: int, seed_time: float, with_migration: bool = False
) -> list[Assignment]:
    """Starting points: CoreRR, NodeRR, and CP-SAT's best placement for each objective
    alone and for equal weights (deterministic CP-SAT, so the seed fixes them)."""
    out = [a for a in (corerr(inst), noderr(inst)) if a is not None]
    if inst.has_current and all(h is not None for h in inst.current):
        out.append(tuple(h for h in inst.current if h is not None))
    if seed_time <= 0:
        return out
    corners = [Weights(1, 0, 0), Weights(0, 1, 0), Weights(0, 0, 1), Weights(1, 1, 1)]
    if with_migration:
        corners.append(Weights(0, 0, 0, 1))
    for w in corners:
        opts = SolveOptions(time_limit=seed_time, seed=seed, deterministic=True)
        r = cpsat.solve(inst, w, opts)
        if r.assignment is not None:
            out.append(r.assignment)
    return out


def random_front(problem: PlacementProblem, evaluations: int, seed: int) -> FrontResult:
    """Baseline: the non-dominated set of ``evaluations`` repaired random placements."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, len(problem.inst.hosts), size=(evaluations, problem.n_var))
    for row in X:
        repair_row(problem.inst, row, rng)
    out: dict[str, Any] = {}
    problem._evaluate(X, out)
    ok = out["G"][:, 0] <= 0
    fx, ff = non_dominated(X[ok], out["F"][ok])
    return FrontResult(fx, ff, hypervolume(ff), 1, evaluations)


def exact_front(problem: PlacementProblem) -> FrontResult:
    """The true front by enumerating every feasible placement (tiny instances only)."""
    X = np.array(feasible_assignments(problem.inst), dtype=np.int64)
    out: dict[str, Any] = {}
    problem._evaluate(X, out)
    fx, ff = non_dominated(X, out["F"])
    return FrontResult(fx, ff, hypervolume(ff), 0, len(X))


def hypervolume(F: FloatArray) -> float:
    if len(F) == 0:
        return 0.0
    ref = np.full(F.shape[1], HV_REFERENCE)
    return float(HV(ref_point=ref)(F))


def non_dominated(X: IntArray, F: FloatArray) -> tuple[IntArray, FloatArray]:
    """The non-dominated rows, one per distinct objective vector (first seen wins)."""
    if len(F) == 0:
        return X, F
    front = NonDominatedSorting().do(F, only_non_dominated_front=True)
    seen: dict[tuple[float, ...], int] = {}
    for k in sorted(int(i) for i in front):
        seen.setdefault(tuple(np.round(F[k], 12)), k)
    keep = sorted(seen.values())
    return X[keep], F[keep]


def pareto_front(
    problem: PlacementProblem,
    algorithm: Algorithm,
    generations: int,
    seed: int,
    on_generation: Callable[[Generation], bool] | None = None,
) -> FrontResult:
    """Run ask-and-tell for ``generations``; ``on_generation`` returning False cancels.

    An archive keeps every non-dominated placement seen, not only the last population.
    """
    algorithm.setup(problem, termination=("n_gen", generations), seed=seed, verbose=False)
    arch_X = np.empty((0, problem.n_var), dtype=np.int64)
    arch_F = np.empty((0, problem.n_obj))
    evaluations = 0
    gen = 0
    while algorithm.has_next():
        pop: Population = algorithm.ask()
        algorithm.evaluator.eval(problem, pop)
        algorithm.tell(infills=pop)
        gen += 1
        evaluations += len(pop)
        ok = pop.get("G")[:, 0] <= 0
        arch_X, arch_F = non_dominated(
            np.vstack([arch_X, pop.get("X")[ok].astype(np.int64)]),
            np.vstack([arch_F, pop.get("F")[ok]]),
        )
        if on_generation is not None:
            g = Generation(gen, evaluations, hypervolume(arch_F), len(arch_F))
            if not on_generation(g):
                break
    return FrontResult(arch_X, arch_F, hypervolume(arch_F), gen, evaluations)
