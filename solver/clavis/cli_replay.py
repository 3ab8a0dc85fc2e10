"""`clavis solve --replay RECORD`: solve a clavisd plan's recorded inputs again, with its
recorded weights and options, and say whether the placement and P, D, C, M, F match
(service/replay.py; docs/clavisd.md, "Decision replay").

Exit codes: 0 reproduced, 1 not reproduced (or no placement), 2 bad input (nothing written).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
from pathlib import Path

from clavis.documents import InputError, load_cluster, read_data, write_json_atomic
from clavis.objectives import bounds
from clavis.placement import place
from clavis.placement.result import PlacementResult
from clavis.report import solution_document, summary
from clavis.service import replay
from clavis.service.replay import Comparison, ReplayRecord, Row

# Flags whose values a replay takes from the record: giving one is a mistake, not an override.
_FROM_RECORD = {
    "workload": "--workload", "current": "--current", "weights": "--weights",
    "weights_file": "--weights-file", "method": "--method", "time_limit": "--time-limit",
    "seed": "--seed", "workers": "--workers", "memory_limit": "--memory-limit",
}  # fmt: skip


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.9g}"


def _table(rows: tuple[Row, ...], head: tuple[str, str]) -> str:
    lines = [f"{'value':<6} {head[0]:>16} {head[1]:>16} {'difference':>12}"]
    for r in rows:
        diff = "-" if r.diff is None else f"{r.diff:+.3g}"
        lines.append(f"{r.name:<6} {_num(r.stored):>16} {_num(r.replayed):>16} {diff:>12}")
    return "\n".join(lines)


def describe_record(record: ReplayRecord, source: str) -> str:
    made = dt.datetime.fromtimestamp(record.made, dt.UTC).isoformat(timespec="seconds")
    plan = (f"plan {record.plan}" if record.plan is not None
            else "a plan not stored (a dry run's, or a deferred one)")  # fmt: skip
    jobs = record.workload.jobs
    w, o = record.weights, record.options
    wv = w.values
    wid = f", id {w.id}" if w.id is not None else ""
    mode = ("deterministic: CP-SAT alone, one worker, deterministic time" if o.deterministic
            else "on the wall clock: search turns and bound as clavisd ran them")  # fmt: skip
    return "\n".join([
        f"replay of {plan} (made {made}, decision {record.decision}) from {source}",
        f"inputs: cluster {record.cluster.name!r} with {len(record.cluster.hosts)} hosts, "
        f"{sum(len(j.containers) for j in jobs)} containers in {len(jobs)} jobs, their "
        "current placement",
        f"weights: P {wv.P:.6g}, D {wv.D:.6g}, C {wv.C:.6g}, M {wv.M:.6g} ({w.source}{wid})",
        f"options: {o.method}, time limit {o.time_limit_s:g} s, seed {o.seed}, "
        f"{o.workers} workers, memory {o.memory_limit_bytes / 2**30:.2f} GiB; {mode}",
        f"software: clavis-solver {record.software.clavis_solver}, ortools "
        f"{record.software.ortools}",
    ])  # fmt: skip


def describe_comparison(c: Comparison) -> str:
    lines = []
    if c.rescore_equal:
        lines.append("stored placement scored again on the stored inputs: the stored values")
    else:
        lines.append("stored placement scored again on the stored inputs: DIFFERENT values")
        lines.append(_table(c.rescored, ("stored", "re-scored")))
    lines.append(_table(c.rows, ("stored", "replay")))
    if not c.moved:
        lines.append(f"placement: the same ({c.containers} containers on their stored hosts)")
    else:
        shown = ", ".join(f"{n} {a}->{b}" for n, a, b in c.moved[:5])
        more = f" and {len(c.moved) - 5} more" if len(c.moved) > 5 else ""
        lines.append(f"placement: {len(c.moved)} of {c.containers} containers on another "
                     f"host (stored->replay): {shown}{more}")  # fmt: skip
    if not c.deterministic:
        lines.append("note: the record was made on the wall clock (repack.deterministic = "
                     "false): how far the search turns get depends on the machine and its "
                     "load, and CP-SAT's workers race, so the placement and P, D, C, M may "
                     f"differ; F is compared within {c.tolerance:g}")  # fmt: skip
    if c.margin:
        lines.append(c.margin)
    lines.append(c.verdict)
    return "\n".join(lines)


def cmd_replay(args: argparse.Namespace) -> int:
    source = str(args.replay)
    given = [flag for dest, flag in _FROM_RECORD.items() if getattr(args, dest) is not None]
    if given:
        raise InputError(f"--replay takes the documents, weights and options from the record; "
                         f"drop {', '.join(given)}")  # fmt: skip
    tolerance = args.tolerance
    if tolerance is not None and not (math.isfinite(tolerance) and tolerance >= 0):
        raise InputError(f"--tolerance must be a non-negative number, got {tolerance}")
    out = Path(args.out) if args.out else None
    if out is not None and not out.resolve().parent.is_dir():
        raise InputError(f"--out: directory {out.resolve().parent} does not exist")
    record = replay.parse(read_data(Path(source)), source)
    if args.cluster is not None:
        ours = load_cluster(Path(args.cluster))
        replay.check_cluster(record, ours, source, f"--cluster {args.cluster}")
    inst = replay.instance(record, source)
    replay.refuse_violations(record, inst, source)
    print(describe_record(record, source))
    note = replay.software_note(record.software)
    if note:
        print(note)
    weights = record.weights.weights()
    current = tuple(h for h in inst.current if h is not None)
    options = record.options.solve_options(current)
    result: PlacementResult = place(record.options.method, inst, weights, options)
    print(summary(result))
    c = replay.compare(record, inst, result, tolerance)
    print(describe_comparison(c))
    if out is not None and result.assignment is not None:
        doc = solution_document(inst, result, weights, bounds(inst), options)
        write_json_atomic(out, doc.model_dump(mode="json", by_alias=True))
        print(f"wrote {out}")
    return 0 if c.reproduced else 1
