"""Pareto-front benchmark (issue 3).

1. Enumerable instances (4 hosts, 8 containers): the exact front is enumerated and
   NSGA-II runs until it reaches 99% of the exact hypervolume or 10 s pass.
2. The Parapluie representative workload (8 x 24-core hosts, 16 containers): NSGA-II,
   NSGA-III, SMS-EMOA and random sampling at equal evaluation counts, by hypervolume
   (normalised objectives, reference point 1.1) and wall time.

    python bench/pareto/pareto_bench.py [--seeds 5] [--evaluations 10000] [--population 100]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report import describe, machine, write_json, write_section

from clavis.documents import load_cluster, load_workload
from clavis.instance import Assignment, build_instance
from clavis.pareto import (
    ALGORITHMS,
    Generation,
    PlacementProblem,
    exact_front,
    hypervolume,
    make_algorithm,
    non_dominated,
    pareto_front,
    random_front,
    seed_placements,
)
from clavis.synthetic import enumerable_instance

ROOT = Path(__file__).resolve().parents[2]
TARGET, BUDGET = 0.99, 10.0


@dataclass
class SmallRun:
    seed: int
    placements: int
    exact_front: int
    exact_hv: float
    enumeration_s: float
    nsga2_hv: float
    ratio: float
    seconds: float
    time_to_target_s: float | None
    generations: int
    unseeded_ratio: float
    unseeded_time_to_target_s: float | None


@dataclass
class ParapluieRun:
    algorithm: str
    seed: int
    hv: float
    front: int
    evaluations: int
    seconds: float
    hv_ratio_to_union: float = 0.0


def _until_target(
    problem: PlacementProblem, starts: list[Assignment], goal: float, seed: int
) -> tuple[float, float, float | None, int]:
    """NSGA-II until ``goal`` hypervolume or BUDGET seconds: (hv, seconds, time to goal, gens)."""
    start = time.monotonic()
    reached: list[float] = []

    def watch(g: Generation) -> bool:
        elapsed = time.monotonic() - start
        if g.hypervolume >= goal:
            reached.append(elapsed)
        return not reached and elapsed < BUDGET

    res = pareto_front(problem, make_algorithm("nsga2", 60, starts, 3), 10_000, seed, watch)
    hit = round(reached[0], 2) if reached else None
    return res.hypervolume, round(time.monotonic() - start, 2), hit, res.generations


def small_one(seed: int) -> SmallRun:
    inst = build_instance(*enumerable_instance(seed))
    problem = PlacementProblem(inst)
    t = time.monotonic()
    exact = exact_front(problem)
    t_exact = time.monotonic() - t
    goal = TARGET * exact.hypervolume
    hv, seconds, hit, gens = _until_target(problem, seed_placements(inst, seed, 0.2), goal, seed)
    # The same search from random rows alone: what the genetic operators do by themselves.
    hv0, _, hit0, _ = _until_target(problem, [], goal, seed)
    row = SmallRun(
        seed=seed,
        placements=exact.evaluations,
        exact_front=len(exact.F),
        exact_hv=exact.hypervolume,
        enumeration_s=round(t_exact, 2),
        nsga2_hv=hv,
        ratio=hv / exact.hypervolume,
        seconds=seconds,
        time_to_target_s=hit,
        generations=gens,
        unseeded_ratio=hv0 / exact.hypervolume,
        unseeded_time_to_target_s=hit0,
    )
    print(f"small {seed}: ratio {row.ratio:.4f} in {row.seconds} s", file=sys.stderr)
    return row


def parapluie(seeds: int, evaluations: int, pop: int) -> list[ParapluieRun]:
    pp = ROOT / "examples" / "parapluie"
    inst = build_instance(
        load_cluster(pp / "cluster.yaml"), load_workload(pp / "representative.yaml")
    )
    problem = PlacementProblem(inst)
    runs, fronts = [], []
    for seed in range(seeds):
        starts = seed_placements(inst, seed, seed_time=0.5)
        for name in (*ALGORITHMS, "random"):
            t = time.monotonic()
            if name == "random":
                res = random_front(problem, evaluations, seed)
            else:
                algo = make_algorithm(name, pop, starts, 3)
                res = pareto_front(problem, algo, max(1, evaluations // pop), seed)
            runs.append(ParapluieRun(name, seed, res.hypervolume, len(res.F), res.evaluations,
                                     round(time.monotonic() - t, 2)))  # fmt: skip
            fronts.append((res.X, res.F))
            print(f"parapluie {name} {seed}: hv {res.hypervolume:.5f}", file=sys.stderr)
    _, union = non_dominated(np.vstack([x for x, _ in fronts]), np.vstack([f for _, f in fronts]))
    best = hypervolume(union)
    for r in runs:
        r.hv_ratio_to_union = r.hv / best
    return runs


def markdown(
    rows: list[SmallRun], runs: list[ParapluieRun], info: dict[str, object], a: argparse.Namespace
) -> str:
    ratios = [r.ratio for r in rows]
    out = [
        "## Pareto fronts (issue 3)",
        "",
        f"{describe(info)} Command: `python bench/pareto/pareto_bench.py --seeds {a.seeds} "
        f"--evaluations {a.evaluations} --population {a.population}`; raw results in "
        "`bench/results/pareto.json`.",
        "",
        f"**Enumerable instances** (4 hosts in 2 racks, 8 containers; {len(rows)} seeds): NSGA-II "
        f"(population 60) against the exact front, until {TARGET:.0%} of the exact "
        f"hypervolume or {BUDGET:g} s; seeded as `clavis pareto` does (CoreRR, NodeRR, CP-SAT "
        "corners) and, to show what the operators do alone, from random rows only.",
        "",
        "| seed | placements | exact front | exact HV | NSGA-II HV | ratio | time to 99% s "
        "| unseeded ratio | unseeded time to 99% s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r.seed} | {r.placements} | {r.exact_front} | {r.exact_hv:.4f} | "
            f"{r.nsga2_hv:.4f} | {r.ratio:.4f} | {r.time_to_target_s} | "
            f"{r.unseeded_ratio:.4f} | {r.unseeded_time_to_target_s} |"
        )
    out += [
        "",
        f"Median ratio {statistics.median(ratios):.4f}, minimum {min(ratios):.4f}; "
        f"{sum(r >= TARGET for r in ratios)}/{len(ratios)} reach the target.",
        "",
        f"**Parapluie representative workload** (`examples/parapluie/representative.yaml`): "
        f"{a.evaluations} evaluations per run, population {a.population}, {a.seeds} seeds; "
        "HV relative to the union of every front found. The three genetic algorithms start "
        "from the same seeded rows as `clavis pareto` (CoreRR, NodeRR, CP-SAT corners; made "
        "once per seed and counted in neither evaluations nor seconds); random sampling draws "
        "every evaluation at random.",
        "",
        "| algorithm | HV median | HV / union median | front size median | seconds median |",
        "|---|---|---|---|---|",
    ]
    for name in (*ALGORITHMS, "random"):
        rs = [r for r in runs if r.algorithm == name]
        out.append(
            f"| {name} | {statistics.median(r.hv for r in rs):.4f} | "
            f"{statistics.median(r.hv_ratio_to_union for r in rs):.4f} | "
            f"{statistics.median(r.front for r in rs):g} | "
            f"{statistics.median(r.seconds for r in rs):.1f} |"
        )
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--evaluations", type=int, default=10_000)
    ap.add_argument("--population", type=int, default=100)
    ap.add_argument("--out", default=str(ROOT / "bench/results/pareto.json"))
    ap.add_argument("--md", default=str(ROOT / "docs/benchmarks.md"))
    args = ap.parse_args()
    if args.seeds < 1 or args.population < 4 or args.evaluations < args.population:
        print("bench: need seeds >= 1, population >= 4, evaluations >= population",
              file=sys.stderr)  # fmt: skip
        return 2
    info = machine()
    rows = [small_one(seed) for seed in range(args.seeds)]
    runs = parapluie(args.seeds, args.evaluations, args.population)
    write_json(Path(args.out), {"machine": info, "config": vars(args),
                                "small": [asdict(r) for r in rows],
                                "parapluie": [asdict(r) for r in runs]})  # fmt: skip
    section = markdown(rows, runs, info, args)
    write_section(Path(args.md), "pareto-bench", section)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
