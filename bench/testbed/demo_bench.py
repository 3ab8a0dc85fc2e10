"""`make demo` wall time (issue 13: cold under 5 minutes, warm under 90 s).

    python bench/testbed/demo_bench.py [--warm-runs 2] [--no-write | --render]

Root only. The cold run is `make demo` with a new, empty cache directory
(`CLAVIS_CACHE`, as bench/testbed/testbed_bench.py does): CRIU 4.2.1 fetched from Debian
sid and built, the container rootfs and the MariaDB template built, then the whole
scenario (deploy/testbed/ctb/demo.py). The machine's packages and the venv are present
(reinstalling them would mean removing the machine's own); the bench records how long
the idempotent install steps take when there is nothing to do. The warm runs reuse the
bench's cache and start with the previous run's testbed up, as an admin running `make
demo` twice would. Each run must exit 0 and say "demo done"; the bench holds the testbed
tests' lock meanwhile and takes its testbed down at the end. Results go to
bench/results/demo.json and the demo section of docs/benchmarks.md.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report import describe, machine
from testbed.testbed_bench import (
    ROOT,
    STATE,
    BenchError,
    _down,
    _reflow,
    _s,
    bench_main,
    load_average,
    tool_versions,
)

SECTION = "demo-bench"
RUN_TIMEOUT_S = 1800.0  # cold builds CRIU: minutes at most; every wait in the demo is bounded
COLD_TARGET_S, WARM_TARGET_S = 300.0, 90.0


def one_demo(case: str, env: dict[str, str]) -> dict[str, Any]:
    load = load_average()
    up_before = STATE.exists()
    t0 = time.monotonic()
    cp = subprocess.run(["make", "-C", str(ROOT), "demo"], env=env, capture_output=True,
                        text=True, timeout=RUN_TIMEOUT_S, check=False)  # fmt: skip
    wall = time.monotonic() - t0
    done = re.search(r"demo done in (\d+)s", cp.stdout)
    if cp.returncode != 0 or not done:
        raise BenchError(f"{case}: make demo exited {cp.returncode}:\n"
                         f"{cp.stdout[-3000:]}\n{cp.stderr[-3000:]}")  # fmt: skip
    up = re.search(r"up in ([\d.]+)s; every host", cp.stdout)
    plan = re.search(r"plan \d+: done after ([\d.]+)s", cp.stdout)
    line = re.search(r"^phases \(s\): (.*)$", cp.stdout, re.M)
    phases = {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", line.group(1))} if line else {}
    return {
        "case": case,
        "wall_s": round(wall, 2),
        "scenario_s": float(done.group(1)),
        "up_stack_s": float(up.group(1)) if up else None,
        "plan_s": float(plan.group(1)) if plan else None,
        # the demo's own breakdown (ctb.demo.scenario: "phases (s): name=seconds ...")
        "phases": phases,
        "testbed_up_before": up_before,
        "load_average_before": load,
    }


def run(warm_runs: int) -> dict[str, Any]:
    if STATE.exists():
        raise BenchError(f"{STATE} exists: a testbed is up; bring it down first")
    cache = Path(tempfile.mkdtemp(prefix="clavis-demo-bench-cache-", dir="/var/cache"))
    env = {**os.environ, "CLAVIS_CACHE": str(cache)}
    try:
        runs = [one_demo("cold", env)]
        runs += [one_demo("warm", env) for _ in range(warm_runs)]
    finally:
        if not STATE.exists() or _down(env):
            shutil.rmtree(cache, ignore_errors=True)
        else:
            print(f"demo bench: down failed; {cache} kept", file=sys.stderr)
    warm = [r["wall_s"] for r in runs if r["case"] == "warm"]
    return {
        "runs": runs,
        "cold_wall_s": runs[0]["wall_s"],
        "warm_median_wall_s": round(statistics.median(warm), 2) if warm else None,
        "targets_s": {"cold": COLD_TARGET_S, "warm": WARM_TARGET_S},
        "tools": tool_versions(),
        "machine": machine(),
    }


# what each of the demo's phases is, in the order it runs them
PHASES = {
    "down": "the previous testbed taken down (warm runs)",
    "up": "`clavis-testbed up --stack` (cold: the rootfs and MariaDB template built)",
    "hosts": "every host's report with watts in clavisd",
    "build": "the demo's three programs compiled",
    "jobs": "five sbatch jobs, each until it runs",
    "linked": "every job's nodes linked in clavisd",
    "classes": "every job classed by clavisd (7 of 10 intervals)",
    "advice": "the advice carrying those classes",
    "unhinted": "stream-b ended, stream-c submitted unhinted",
    "pinned": "stream-d pinned beside a devil, linked and classed",
    "dry_run": "`clavis repack --dry-run`",
    "agents_stopped": "agents stopped, `--apply` refused, agents started",
    "apply": "`clavis repack --apply`",
    "plan": "the plan's steps, to `done`",
    "slurm_view": "squeue, sacct, sinfo",
    "settle": "clavisd sees the moved nodes, classes again",
    "objectives": "P, D, C as clavisd computes them",
    "cancel": "the demo's jobs cancelled",
}


def phase_table(runs: list[dict[str, Any]]) -> str:
    """One row per phase, one column per run: where the time goes."""
    head = "| phase | what | " + " | ".join(r["case"] for r in runs) + " |"
    rule = "|---|---|" + "---|" * len(runs)
    names = list(PHASES) + sorted({k for r in runs for k in r["phases"]} - set(PHASES) - {"total"})
    rows = [
        f"| {name} | {PHASES.get(name, '')} | "
        + " | ".join(_s(r["phases"].get(name)) for r in runs) + " |"
        for name in [*names, "total"]
    ]  # fmt: skip
    return "\n".join([head, rule, *rows])


def section(res: dict[str, Any]) -> str:
    rows: str = "\n".join(
        f"| {r['case']} | {_s(r['wall_s'])} | {_s(r['wall_s'] - r['scenario_s'])} | "
        f"{_s(r['scenario_s'])} | {_s(r['up_stack_s'])} | "
        f"{_s(r['plan_s'])} | {'yes' if r['testbed_up_before'] else 'no'} | "
        f"{r['load_average_before']:.2f} |"
        for r in res["runs"]
    )
    cold, warm = res["cold_wall_s"], res["warm_median_wall_s"]
    verdict = (
        f"Cold {_s(cold)} (target under {COLD_TARGET_S:.0f} s: "
        f"{'met' if cold < COLD_TARGET_S else 'NOT met'}); warm {_s(warm)} (median of "
        f"{len(res['runs']) - 1}; target under {WARM_TARGET_S:.0f} s: "
        f"{'met' if warm is not None and warm < WARM_TARGET_S else 'NOT met'})."
    )
    text: str = _reflow(f"""## `make demo` wall time (`bench/testbed/demo_bench.py`)

`make demo` as root, timed from the command's start to its end: the install steps (with
the machine's packages and the venv present: nothing to do), a fresh `clavis-testbed up
--stack --spare-cpus-per-host 1` (a testbed already up is taken down first), then the
scenario of docs/testbed.md ("`make demo`"): the jobs, their classes, the advice, the
unhinted streaming job, and clavisd's plan applied by the migrator agents with Slurm's
view and P, D, C checked afterwards. The cold run has a new, empty `CLAVIS_CACHE`, so
it also fetches and builds CRIU 4.2.1 and builds the rootfs and the MariaDB template;
the warm runs reuse that cache and find the previous run's testbed up. "make's steps" is
the wall time less the scenario: the install steps (`testbed-install`,
which builds CRIU on the cold run, and `slurm-plugin`) and the demo's start. "scenario" is
what the demo reports of itself, "up --stack" its fresh stack (on warm runs with the
previous one's `down`), "plan" the plan from
`--apply` to `done`. Load average (1 min) before each run: other sessions share the
machine's 2 cores.

| case | wall time | make's steps | scenario | up --stack | plan | testbed up before | load before |
|---|---|---|---|---|---|---|---|
{rows}

Where the time goes, as the demo reports it of itself ("phases (s)" at its end):

{phase_table(res["runs"])}

{verdict} Not included: installing the testbed's apt packages (41 s measured by hand on
2026-11-22) and creating the venv on a machine that has neither.

{describe(res["machine"])} Slurm: {res["tools"]["slurm"]}; LXC {res["tools"]["lxc"]}.
Command (as root): `python bench/testbed/demo_bench.py --warm-runs {len(res["runs"]) - 1}`;
raw results in `bench/results/demo.json`.
""")
    return text


def main() -> int:
    results = ROOT / "bench" / "results" / "demo.json"
    return bench_main(
        "demo bench", description=__doc__, results=results, section_name=SECTION,
        run_bench=run, render=section, warm_runs=2,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
