"""`clavis pareto` and `clavis calibrate`: stage 1 of Clavis2D (thesis §5.5.1)."""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from clavis.calibrate import CalibrationError, calibrate_picks
from clavis.documents import InputError, load, load_cluster, load_placement, load_workload
from clavis.documents import write_json_atomic as write
from clavis.instance import build_instance
from clavis.model import CalibrationOutcome, Front
from clavis.pareto import (
    ALGORITHMS,
    Generation,
    PlacementProblem,
    make_algorithm,
    pareto_front,
    seed_placements,
)
from clavis.pareto_document import front_document


class _Bar:
    """One progress line on stderr: rewritten in place on a terminal, every 10% otherwise."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled = total, enabled
        self.tty = sys.stderr.isatty()
        self.step = max(1, total // 10)

    def __call__(self, g: Generation) -> bool:
        if not self.enabled:
            return True
        line = (
            f"generation {g.number}/{self.total}  evaluations {g.evaluations}  "
            f"hypervolume {g.hypervolume:.5f}  front {g.front_size}"
        )
        if self.tty:
            end = "\n" if g.number == self.total else ""
            print(f"\r{line}", end=end, file=sys.stderr, flush=True)
        elif g.number % self.step == 0 or g.number == self.total:
            print(line, file=sys.stderr, flush=True)
        return True


def cmd_pareto(args: argparse.Namespace) -> int:
    cluster = load_cluster(Path(args.cluster))
    workload = load_workload(Path(args.workload))
    current = load_placement(Path(args.current)) if args.current else None
    inst = build_instance(
        cluster,
        workload,
        current,
        current_source=str(args.current),
        workload_source=str(args.workload),
    )
    if args.with_migration and current is None:
        raise InputError("--with-migration needs --current (M is measured against it)")
    if args.population < 4 or args.generations < 1 or args.seed_time < 0:
        raise InputError("--population must be >= 4, --generations >= 1, --seed-time >= 0")
    out = Path(args.out)
    if not out.resolve().parent.is_dir():
        raise InputError(f"--out: directory {out.resolve().parent} does not exist")
    start = time.monotonic()
    problem = PlacementProblem(inst, with_migration=args.with_migration)
    seeds = seed_placements(inst, args.seed, args.seed_time, args.with_migration)
    algo = make_algorithm(args.algorithm, args.population, seeds, problem.n_obj)
    result = pareto_front(
        problem, algo, args.generations, args.seed, _Bar(args.generations, not args.quiet)
    )
    front = front_document(
        problem,
        result,
        cluster=cluster,
        workload=workload,
        current=current,
        algorithm=args.algorithm,
        population=args.population,
        seed=args.seed,
        seed_time=args.seed_time,
        seconds=time.monotonic() - start,
    )
    if front is None:
        print("clavis: no feasible placement found", file=sys.stderr)
        return 1
    write(out, front.model_dump(mode="json", by_alias=True))
    _print_front(front)
    print(f"wrote {out}: {len(front.points)} schedules, hypervolume {result.hypervolume:.5f}")
    return 0


def _print_front(front: Front) -> None:
    names = front.search.objectives
    print("id  " + "  ".join(f"{n}_n".rjust(8) for n in names) + "   P (W)  D (cores)  C (B/s)")
    for p in front.points:
        norm = "  ".join(f"{getattr(p.normalised, n):8.4f}" for n in names)
        print(f"{p.id:<3d} {norm}  {p.raw.P:7.1f}  {p.raw.D:9.0f}  {p.raw.C:.3g}")


def _parse_picks(text: str) -> list[int]:
    try:
        picks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise InputError(f"--pick: expected comma-separated schedule ids, got {text!r}") from exc
    seen = set()
    for p in picks:
        if p in seen:
            raise InputError(f"--pick: schedule {p} is given twice")
        seen.add(p)
    return picks


def _print_outcomes(outcomes: Sequence[CalibrationOutcome]) -> None:
    print("method   " + "  ".join(f"{n:>7}" for n in "PDCM") + "   residual   regret")
    for o in outcomes:
        if o.weights is None:
            print(f"{o.method:8s} failed: {o.error}")
            continue
        w = "  ".join(f"{getattr(o.weights, n):7.4f}" for n in "PDCM")
        print(f"{o.method:8s} {w}   {o.residual:8.4g}  {o.regret:8.4g}")


def cmd_calibrate(args: argparse.Namespace) -> int:
    path = Path(args.front)
    front = load(Front, path)
    picks = _parse_picks(args.pick)
    try:
        picked = calibrate_picks(front, picks)
    except CalibrationError as exc:
        raise InputError(f"--pick: {exc} ({path})") from exc
    _print_outcomes(picked.outcomes)
    method = args.method or picked.recommended
    why = picked.refusal(args.method)
    if why is not None:
        way_out = "" if args.method is not None else \
            f" (pass --method {method} to write the {method} weights anyway)"  # fmt: skip
        raise InputError(f"{why}; nothing written{way_out}")
    doc = picked.weights_file(args.method, hashlib.sha256(path.read_bytes()).hexdigest())
    print(f"recommended: {picked.reason}")
    if args.out:
        write(Path(args.out), doc.model_dump(mode="json"))
        print(f"wrote {args.out} ({method} weights)")
    return 0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("pareto", help="NSGA-II Pareto front of placements (calibration)")
    p.add_argument("--cluster", required=True)
    p.add_argument("--workload", required=True)
    p.add_argument("--current", help="current placement (needed for --with-migration)")
    p.add_argument("--with-migration", action="store_true", help="add M as a fourth objective")
    p.add_argument("--algorithm", choices=ALGORITHMS, default="nsga2")
    p.add_argument("--population", type=int, default=100)
    p.add_argument("--generations", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--seed-time",
        type=float,
        default=1.0,
        help="CP-SAT budget per seeding solve (deterministic seconds); 0 = none",
    )
    p.add_argument("--out", required=True)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_pareto)

    c = sub.add_parser("calibrate", help="weights from at least three picked schedules")
    c.add_argument("--front", required=True, help="front written by `clavis pareto`")
    c.add_argument("--pick", required=True, help="schedule ids, e.g. 3,17,42")
    c.add_argument(
        "--method",
        choices=["thesis", "inverse"],
        help="whose weights to write (default: the recommended one, if neither method failed)",
    )
    c.add_argument("--out", help="weights file to write")
    c.set_defaults(func=cmd_calibrate)
