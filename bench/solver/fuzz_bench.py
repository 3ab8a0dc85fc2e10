"""`clavis solve` on clusters and weights drawn at random, far from the main bench's shape.

The main bench (realistic_bench.py) fixes its shapes and draws weights from {1..10}: what
the solver was tuned on. Here every case draws its own cluster from ``clavis.realistic``
(3 to 2,048 hosts, 3-90% of cores busy, 0-25% drained, 0-15% down, racks of 1 to 80
hosts, any churn, power noise and devil threshold, with or without a current placement),
its own weights from {0, 1, 2, 3, 5, 8, 10} (zeros included: an admin who does not care
about power sets P's weight to 0) and a limit of 5, 10 or 30 s. Each case is one
`clavis solve` child process (realistic_bench.run_one: wall time, peak RSS, watchdog),
then `clavis evaluate` on the answer it wrote, which must score it alike.

What it checks: every run answers within limit + max(5%, 2 s) or refuses at once; every
answer scores the same when evaluated apart; memory. What it shows: the proven gaps, by
whether a weight is 0, where the bound is weakest.

    python bench/solver/fuzz_bench.py [--cases 40] [--seed 1]   # about 15 min
    python bench/solver/fuzz_bench.py --render                   # docs from stored runs
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from realistic_bench import ROOT, Run, Shape, run_one
from report import describe, machine, write_json, write_section

from clavis.realistic import RealisticSpec, Snapshot, generate

LIMITS = (5.0, 10.0, 30.0)
WEIGHT_CHOICES = (0, 0, 1, 2, 3, 5, 8, 10)  # 0 twice: a quarter of the weights are off
DRAWS_PER_CASE = 20  # the generator refuses clusters too full for their jobs: draw again
F_AGREES = 1e-5  # `clavis evaluate` prints F to six decimals


@dataclass(frozen=True)
class Case:
    spec: RealisticSpec
    weights: list[int]
    limit: float


@dataclass(frozen=True)
class Checked:
    """One case's run and what `clavis evaluate` said of its answer."""

    spec: dict[str, object]
    run: Run
    evaluated_f: float | None
    scored_alike: bool | None  # None: no answer to evaluate


def draw(rng: random.Random) -> Case:
    hosts = int(math.exp(rng.uniform(math.log(3), math.log(2048))))
    low = rng.randint(1, 60)
    spec = RealisticSpec(
        hosts=hosts,
        seed=rng.randint(100, 10**6),
        utilisation=rng.uniform(0.03, 0.9),
        current=rng.random() < 0.6,
        drained=rng.uniform(0, 0.25),
        down=rng.uniform(0, 0.15),
        rack_hosts=(low, rng.randint(low, low + 20)),
        churn=rng.uniform(0, 3),
        power_noise=rng.uniform(0, 0.45),
        threshold_mpki=rng.uniform(1, 9),
    )
    weights = [rng.choice(WEIGHT_CHOICES) for _ in range(4 if spec.current else 3)]
    if not any(weights):
        weights[rng.randrange(len(weights))] = 1
    return Case(spec, weights, rng.choice(LIMITS))


def evaluate(files: dict[str, Path], answer: Path, weights: list[int]) -> float | None:
    """F of ``answer`` as `clavis evaluate` scores it, or None if it refuses."""
    cmd = [sys.executable, "-m", "clavis.cli", "evaluate", "--cluster", str(files["cluster"]),
           "--workload", str(files["workload"]), "--weights", ",".join(map(str, weights)),
           "--placement", str(answer)]  # fmt: skip
    if "current" in files:
        cmd += ["--current", str(files["current"])]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT, timeout=600)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("F = ")]
    return float(lines[0].split()[-1]) if done.returncode == 0 and lines else None


def run_case(case: Case, snapshot: Snapshot, n: int, tmp: Path, memory_cap_mib: float) -> Checked:
    where = tmp / f"case{n}"
    where.mkdir()
    files = {p.stem: p for p in snapshot.write(where)}
    containers = sum(len(j["containers"]) for j in snapshot.workload["jobs"])
    shape = Shape("fuzz", case.spec.hosts, containers, case.spec.seed, case.spec.current)
    run = run_one(shape, files, weights=case.weights, method="cpsat", limit=case.limit,
                  tmp=where, memory_cap_mib=memory_cap_mib)  # fmt: skip
    got: float | None = None
    alike: bool | None = None
    if run.F is not None:
        got = evaluate(files, where / "answer.json", case.weights)
        alike = got is not None and abs(got - run.F) <= F_AGREES
    return Checked(asdict(case.spec), run, got, alike)


# --- summary ----------------------------------------------------------------------------


def _pct(xs: list[float], q: float) -> str:
    if not xs:
        return "–"
    xs = sorted(xs)
    return f"{100 * xs[min(len(xs) - 1, int(q * len(xs)))]:.1f}%"


def _gap_row(name: str, rs: list[Checked]) -> str:
    gaps = [c.run.gap for c in rs if c.run.gap is not None]
    med = f"{100 * statistics.median(gaps):.1f}%" if gaps else "–"
    return f"| {name} | {len(rs)} | {med} | {_pct(gaps, 0.9)} | {_pct(gaps, 1.0)} |"


def markdown(payload: dict[str, Any]) -> str:
    checked = [_load(c) for c in payload["cases"]]
    runs = [c.run for c in checked]
    answered = [r for r in runs if r.F is not None]
    late = [r for r in runs if r.F is not None and not r.in_time]
    refused = [r for r in runs if r.status == "REFUSED"]
    other = [r for r in runs if r.F is None and r.status != "REFUSED"]
    alike = sum(1 for c in checked if c.scored_alike)
    over = max((r.solve_seconds - r.limit for r in answered if r.solve_seconds), default=0.0)
    info = payload["machine"]
    lines = [
        "## Solver on random clusters and weights (`bench/solver/fuzz_bench.py`)",
        "",
        f"{describe(info)} Command: `make bench-fuzz` "
        f"(`python bench/solver/fuzz_bench.py --cases {payload['config']['cases']} "
        f"--seed {payload['config']['seed']}`), "
        f"{payload['elapsed_s'] / 60:.0f} min; raw runs in `bench/results/fuzz.json`.",
        "",
        "Each case draws its own cluster (3 to 2,048 hosts, 3-90% of cores busy, up to 25% "
        "drained and 15% down, racks of 1-80 hosts, with or without a current placement), "
        "weights from {0, 1, 2, 3, 5, 8, 10} and a limit of 5, 10 or 30 s: shapes and weights "
        "the solver was not tuned on. cpsat runs as `clavis solve`; `clavis evaluate` then "
        "scores the answer apart.",
        "",
        f"- Answered within limit + max(5%, 2 s): {len(answered) - len(late)} of {len(runs)}"
        f" (most past the limit: {over:+.2f} s); refused at once: {len(refused)}; no answer "
        f"otherwise: {len(other)}.",
        f"- Scored alike by `clavis evaluate` (F within {F_AGREES:g}): {alike} of {len(answered)}.",
        f"- Peak RSS: {max((r.peak_rss_mib for r in runs), default=0):.0f} MiB at most.",
        "",
        "| cases | runs | median gap | 90th percentile | worst |",
        "|---|---|---|---|---|",
        _gap_row("all", checked),
        _gap_row("every weight above 0", [c for c in checked if all(c.run.weights)]),
        _gap_row("P's weight 0", [c for c in checked if c.run.weights[0] == 0]),
        _gap_row("D's weight 0", [c for c in checked if c.run.weights[1] == 0]),
        _gap_row("C's weight 0", [c for c in checked if c.run.weights[2] == 0]),
        _gap_row("with a current placement", [c for c in checked if c.run.current]),
        _gap_row("up to 64 hosts", [c for c in checked if c.run.hosts <= 64]),
        _gap_row("over 256 hosts", [c for c in checked if c.run.hosts > 256]),
    ]
    bad = [c for c in checked if c.run.F is None or not c.run.in_time or c.scored_alike is False]
    for c in bad:
        r = c.run
        lines.append(f"- {r.instance} ({r.weights}, {r.limit:g} s): {r.status} {r.message}")
    return "\n".join(lines)


def _load(raw: dict[str, Any]) -> Checked:
    return Checked(
        spec=raw["spec"],
        run=Run(**raw["run"]),
        evaluated_f=raw["evaluated_f"],
        scored_alike=raw["scored_alike"],
    )


def render(out: Path, md: Path) -> int:
    payload = json.loads(out.read_text())
    write_section(md, "fuzz-bench", markdown(payload))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cases", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "bench/results/fuzz.json"))
    ap.add_argument("--md", default=str(ROOT / "docs/benchmarks.md"))
    ap.add_argument("--no-md", action="store_true", help="do not touch docs/benchmarks.md")
    ap.add_argument("--render", action="store_true", help="re-render the docs section from --out")
    ap.add_argument("--memory-cap-gib", type=float, default=10.0,
                    help="kill a run whose RSS passes this (the machine is shared)")  # fmt: skip
    args = ap.parse_args()
    if args.cases < 1:
        print(f"bench: --cases must be at least 1, got {args.cases}", file=sys.stderr)
        return 2
    out = Path(args.out)
    if args.render:
        return render(out, Path(args.md))
    rng = random.Random(args.seed)
    start = time.monotonic()
    checked: list[Checked] = []
    config = {"cases": args.cases, "seed": args.seed}
    with tempfile.TemporaryDirectory(prefix="clavis-fuzz-") as tmpdir:
        for n in range(args.cases):
            for _ in range(DRAWS_PER_CASE):
                case = draw(rng)
                try:
                    snapshot = generate(case.spec)
                except ValueError:
                    continue  # too full for its jobs: the generator says so, draw again
                break
            else:
                print(f"bench: no cluster drawn in {DRAWS_PER_CASE} tries", file=sys.stderr)
                return 1
            c = run_case(case, snapshot, n, Path(tmpdir), args.memory_cap_gib * 1024)
            checked.append(c)
            r = c.run
            f = "-" if r.F is None else f"{r.F:.5f}"
            g = "-" if r.gap is None else f"{100 * r.gap:.1f}%"
            print(f"{n:3d} {r.instance:32s} w {r.weights} {r.limit:g}s {r.status:9s} F {f} "
                  f"gap {g} solve {r.solve_seconds} s alike {c.scored_alike}",
                  file=sys.stderr, flush=True)  # fmt: skip
            payload = {"machine": machine(), "config": config,
                       "elapsed_s": time.monotonic() - start,
                       "cases": [asdict(x) for x in checked]}  # fmt: skip
            write_json(out, payload)  # after every case: an interrupted run keeps its cases
    return 0 if args.no_md else render(out, Path(args.md))


if __name__ == "__main__":
    sys.exit(main())
