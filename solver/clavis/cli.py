"""`clavis`: solve, evaluate and describe placements from the command line.

Exit codes: 0 success, 1 no placement found, 2 bad input (nothing written).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel

from clavis import cli_generate, cli_service
from clavis.cli_pareto import add_parsers
from clavis.cli_replay import cmd_replay
from clavis.documents import (
    InputError,
    load_cluster,
    load_placement,
    load_workload,
    parse,
    read_data,
    write_json_atomic,
)
from clavis.instance import Instance, build_instance
from clavis.model import Cluster, Front, Placement, WeightsFile, Workload
from clavis.objectives import Weights, bounds, score, violations
from clavis.placement import METHODS, Progress, SolveOptions, place
from clavis.placement.exact import TooLargeError
from clavis.report import host_table, score_table, solution_document, summary
from clavis.service.replay import WALL_CLOCK_TOLERANCE, ReplayRecord

EXIT_OK, EXIT_NO_SOLUTION, EXIT_BAD_INPUT = 0, 1, 2
EXIT_BROKEN_PIPE = 128 + 13  # SIGPIPE: the reader of stdout went away


def _weights(args: argparse.Namespace) -> Weights:
    if args.weights_file is not None:
        data = read_data(Path(args.weights_file))
        if isinstance(data, dict) and data.get("kind") == "clavis.weights":
            w = parse(WeightsFile, data, args.weights_file).weights
            try:
                return Weights(w.P, w.D, w.C, w.M)
            except ValueError as exc:
                raise InputError(f"{args.weights_file}: {exc}") from exc
        plain = data.get("weights", data) if isinstance(data, dict) else None
        if not isinstance(plain, dict):
            raise InputError(f"{args.weights_file}: expected a mapping of weights P, D, C[, M]")
        try:
            return Weights(plain["P"], plain["D"], plain["C"], plain.get("M", 0.0))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(
                f"{args.weights_file}: expected non-negative weights P, D, C[, M]: {exc}"
            ) from exc
    try:
        return Weights.parse(args.weights)
    except ValueError as exc:
        raise InputError(f"--weights: {exc}") from exc


def _instance(args: argparse.Namespace) -> Instance:
    cluster = load_cluster(Path(args.cluster))
    workload = load_workload(Path(args.workload))
    current = load_placement(Path(args.current)) if args.current else None
    return build_instance(
        cluster,
        workload,
        current,
        current_source=str(args.current),
        workload_source=str(args.workload),
    )


class _Ticker:
    """Progress on stderr: improvements (at most one line a second) and, while the
    solver is silent, a heartbeat every ``HEARTBEAT`` seconds so a long solve never
    looks hung."""

    HEARTBEAT = 10.0

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.start = time.monotonic()
        self.last = -1.0
        self.best: Progress | None = None
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def __enter__(self) -> _Ticker:
        if self.enabled:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join(timeout=1.0)

    def _print(self, line: str) -> None:
        with self.lock:
            self.last = time.monotonic()
            print(line, file=sys.stderr, flush=True)

    def _beat(self) -> None:
        while not self.done.wait(self.HEARTBEAT / 2):
            if time.monotonic() - self.last >= self.HEARTBEAT:
                best = "none yet" if self.best is None else f"{self.best.F:.6f}"
                elapsed = time.monotonic() - self.start
                self._print(f"  {elapsed:7.2f} s  searching, best F {best}")

    def __call__(self, p: Progress) -> None:
        self.best = p
        if self.enabled and time.monotonic() - self.last >= 1.0:
            bound = "" if p.bound is None else f"  bound {p.bound:.6f}"
            self._print(f"  {p.seconds:7.2f} s  F {p.F:.6f}{bound}")


# `clavis solve`'s defaults; None in the parser, so that --replay can tell a flag given
SOLVE_DEFAULTS = {"method": "cpsat", "time_limit": 60.0, "seed": 0, "workers": 0}


def cmd_solve(args: argparse.Namespace) -> int:
    if args.replay is not None:
        return cmd_replay(args)
    if args.tolerance is not None:
        raise InputError("--tolerance is for --replay")
    missing = [f for f, v in (("--cluster", args.cluster), ("--workload", args.workload))
               if v is None]  # fmt: skip
    if missing or (args.weights is None and args.weights_file is None):
        need = missing or ["--weights or --weights-file"]
        raise InputError(f"solve needs {', '.join(need)} (or --replay RECORD)")
    for name, value in SOLVE_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    inst = _instance(args)
    weights = _weights(args)
    if args.time_limit <= 0:
        raise InputError(f"--time-limit must be positive, got {args.time_limit}")
    if args.memory_limit is not None and not args.memory_limit > 0:
        raise InputError(f"--memory-limit must be positive (GiB), got {args.memory_limit}")
    out = Path(args.out) if args.out else None
    if out is not None and not out.resolve().parent.is_dir():
        raise InputError(f"--out: directory {out.resolve().parent} does not exist")
    hint = tuple(h for h in inst.current if h is not None) if inst.has_current else None
    if hint is not None and len(hint) != len(inst.containers):
        hint = None  # a partial current placement cannot seed every variable
    ticker = _Ticker(not args.quiet)
    options = SolveOptions(
        time_limit=args.time_limit,
        seed=args.seed,
        workers=args.workers,
        hint=hint,
        on_progress=ticker,
        memory_limit=None if args.memory_limit is None else int(args.memory_limit * 2**30),
    )
    if not args.quiet:
        print(f"solving with {args.method}, time limit {args.time_limit:g} s", file=sys.stderr)
    try:
        with ticker:
            result = place(args.method, inst, weights, options)
    except TooLargeError as exc:
        raise InputError(str(exc)) from exc
    if out is not None and result.assignment is not None and result.score is not None:
        # The answer goes to its file before anything is printed: a reader that stops
        # early (`| head`) must not cost the placement a solve took minutes to find.
        doc = solution_document(inst, result, weights, bounds(inst), options)
        write_json_atomic(out, doc.model_dump(mode="json", by_alias=True))
    print(summary(result))
    if result.assignment is None or result.score is None:
        return EXIT_NO_SOLUTION
    print(host_table(inst, result.assignment))
    print(score_table(result.score, weights))
    if out is not None:
        print(f"wrote {out}")
    return EXIT_OK


def cmd_evaluate(args: argparse.Namespace) -> int:
    inst = _instance(args)
    weights = _weights(args)
    placement = load_placement(Path(args.placement))
    assignment = inst.assignment_of(placement, args.placement)
    problems = violations(inst, assignment)
    if problems:
        raise InputError(f"{args.placement}: {'; '.join(problems)}")
    s = score(inst, assignment, weights)
    print(host_table(inst, assignment))
    print(score_table(s, weights))
    print(f"F = {s.F:.6f}")
    return EXIT_OK


SCHEMAS: dict[str, type[BaseModel]] = {
    "cluster": Cluster,
    "workload": Workload,
    "placement": Placement,
    "front": Front,
    "weights": WeightsFile,
    "replay": ReplayRecord,
}


def cmd_schema(args: argparse.Namespace) -> int:
    docs = {k: m.model_json_schema(by_alias=True) for k, m in SCHEMAS.items()}
    if args.write is None:
        print(json.dumps(docs[args.kind] if args.kind else docs, indent=2))
        return EXIT_OK
    target = Path(args.write)
    target.mkdir(parents=True, exist_ok=True)
    for kind, schema in docs.items():
        write_json_atomic(target / f"{kind}.schema.json", schema)
    return EXIT_OK


def _problem_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--cluster", required=required, help="cluster file (JSON or YAML)")
    p.add_argument("--workload", required=required, help="workload file (JSON or YAML)")
    p.add_argument("--current", help="current placement; enables the migration objective M")
    w = p.add_mutually_exclusive_group(required=required)
    w.add_argument("--weights", help="a,b,c[,m]: weights of P, D, C[, M]; scaled to sum 1")
    w.add_argument("--weights-file", help="weights JSON written by `clavis calibrate`")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="clavis", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True)

    s = sub.add_parser("solve", help="find a placement minimising F, or replay a clavisd plan")
    _problem_args(s, required=False)  # required unless --replay (cmd_solve checks)
    s.add_argument("--method", choices=list(METHODS), help="default cpsat")
    s.add_argument("--time-limit", type=float, help="seconds (default 60)")
    s.add_argument("--seed", type=int, help="default 0")
    s.add_argument(
        "--workers",
        type=int,
        help="solver threads; 0 = all cores (default); from 2, a repack's bound runs in a "
        "process of its own beside the search",
    )
    s.add_argument(
        "--memory-limit",
        type=float,
        default=None,
        metavar="GIB",
        help="resident memory budget in GiB (default: 8, or 3/4 of RAM if less)",
    )
    s.add_argument("--out", help="write the placement and its score here (JSON)")
    s.add_argument("--quiet", action="store_true", help="no progress on stderr")
    s.add_argument(
        "--replay",
        metavar="RECORD",
        help="a clavisd plan's replay record (`clavis plan export`): solve its documents "
        "with its weights and options again and compare (--cluster: check it is this "
        "cluster's); exit 0 reproduced, 1 not",
    )
    s.add_argument(
        "--tolerance",
        type=float,
        help="with --replay of a wall-clock record: largest F difference still reproduced "
        f"(default {WALL_CLOCK_TOLERANCE:g})",
    )
    s.set_defaults(func=cmd_solve)

    e = sub.add_parser("evaluate", help="score a given placement")
    _problem_args(e)
    e.add_argument("--placement", required=True)
    e.set_defaults(func=cmd_evaluate)

    c = sub.add_parser("schema", help="print or write the JSON Schemas of the input files")
    c.add_argument("kind", nargs="?", choices=list(SCHEMAS))
    c.add_argument("--write", metavar="DIR", help="write <kind>.schema.json files into DIR")
    c.set_defaults(func=cmd_schema)
    add_parsers(sub)
    cli_service.add_parsers(sub)
    cli_generate.add_parsers(sub)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except InputError as exc:
        print(f"clavis: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        # The reader of our output went away (`| head`): no traceback, and no second
        # failure when Python flushes stdout at exit; 141 is what a shell reports for a
        # command ended by SIGPIPE.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return code


if __name__ == "__main__":
    sys.exit(main())
