"""The migrator's fault matrix (issue 14), each case run N times on the testbed.

    python bench/migration/faults.py [--runs 10] [--cases NAME,...] [--no-write]

Root only. Runs the fault tests of tests/integration/test_migrator_faults.py (target
agent killed mid-transfer, target disk full, source agent killed after the dump, the
link between the hosts cut mid-transfer, the link cut during the restore) and the
clavisd-killed case of tests/integration/test_demo.py (on the demo's stack, after the
demo, which its fixture runs first) with CLAVIS_FAULT_RUNS=N under pytest: every run
asserts what the suite asserts (the container running exactly once, the job ending well
with one uninterrupted run in accounting, no images left, the step's record, and for
clavisd its plan and its monitors' view), so a run counts as a success only if every one
of those held. pytest brings the testbed up and down and holds the testbed tests' lock
itself. Per case: runs, successes, the median and range of a run's wall time, and the
first failure's message. ``--cases`` runs some cases only; the others keep the figures
of their last run (each case says when it was measured). Results go to
bench/results/migration-faults.json and the section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report import describe, machine, write_json, write_section

ROOT = Path(__file__).resolve().parents[2]
# test file of each case (the rest are test_migrator_faults.py's)
DEMO_TESTS = "tests/integration/test_demo.py"
FAULT_TESTS = "tests/integration/test_migrator_faults.py"
SECTION = "migration-faults"
# what each test case is, in the words
CASES = {
    "test_target_agent_killed_mid_transfer": "target agent killed (-9) mid-transfer",
    "test_target_disk_full": "target disk full",
    "test_link_between_the_hosts_cut_mid_transfer": "link between the hosts cut mid-transfer "
    "(back after the source's call timeout: the transfer starts over)",
    "test_link_cut_until_the_source_gives_up": "link between the hosts cut mid-transfer "
    "for good (the source rolls back; the target drops its images at the deadline)",
    "test_source_agent_killed_after_the_dump": "source agent killed (-9) after the dump",
    "test_link_cut_during_the_restore_is_fenced": "link between the hosts cut during the "
    "restore (fencing: the target kills its uncommitted copy at the fence time, the source "
    "restores its own after it)",
    "test_clavisd_killed_mid_step_finishes_its_plan_when_started_again": "clavisd killed "
    "(-9) mid-step (the stack's agents finish the step; clavisd started again resumes "
    "the plan)",
}
IN_DEMO = {"test_clavisd_killed_mid_step_finishes_its_plan_when_started_again"}


@dataclass
class Case:
    name: str
    what: str
    seconds: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    measured: str = ""  # when (UTC), for a case kept from an earlier run

    @property
    def runs(self) -> int:
        return len(self.seconds)


def parse_junit(xml: str) -> dict[str, Case]:
    """Per test function, each parametrized run's time and failure (pure: tested text in,
    cases out). A run that errored in a fixture counts as failed."""
    cases = {name: Case(name, what) for name, what in CASES.items()}
    for tc in ET.fromstring(xml).iter("testcase"):
        m = re.match(r"(\w+)\[\d+\]$", tc.get("name", ""))
        if not m or m.group(1) not in cases:
            continue
        case = cases[m.group(1)]
        if tc.find("skipped") is not None:
            continue
        case.seconds.append(float(tc.get("time", "0")))
        bad = tc.find("failure")
        if bad is None:
            bad = tc.find("error")
        if bad is not None:
            case.failures.append((bad.get("message") or "failed").splitlines()[0][:200])
    return cases


def table(cases: dict[str, Case]) -> str:
    rows = [
        "| case | runs | ended well | run time median (min-max) | first failure | measured |",
        "|---|---:|---:|---|---|---|",
    ]
    for c in cases.values():
        if not c.runs:
            rows.append(f"| {c.what} | 0 | - | - | not run | - |")
            continue
        med = statistics.median(c.seconds)
        rows.append(
            f"| {c.what} | {c.runs} | {c.runs - len(c.failures)} | {med:.1f} s "
            f"({min(c.seconds):.1f}-{max(c.seconds):.1f}) | "
            f"{c.failures[0].replace('|', '/') if c.failures else '-'} | {c.measured or '-'} |"
        )
    return "\n".join(rows)


def merge(new: dict[str, Case], old: dict[str, Any], date: str, ran: set[str]) -> None:
    """Cases not run now keep an earlier run's figures (``old``: the results file's
    cases; ``date``: that file's, for cases written before they carried their own)."""
    for name, case in new.items():
        prev = old.get(name)
        if name in ran or not isinstance(prev, dict):
            continue
        case.seconds = [float(x) for x in prev.get("seconds", [])]
        case.failures = [str(x) for x in prev.get("failures", [])]
        case.measured = str(prev.get("measured") or date)


def pytest_args(ran: set[str]) -> list[str]:
    """The test files and -k selection that run the cases of ``ran``."""
    files = [f for f, has in ((FAULT_TESTS, ran - IN_DEMO), (DEMO_TESTS, ran & IN_DEMO)) if has]
    return [*files, "-k", " or ".join(sorted(ran))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="runs of each case (default 10)")
    ap.add_argument("--cases", default=",".join(CASES), help="test names, comma-separated")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    ran = {c.strip() for c in args.cases.split(",") if c.strip()}
    unknown = sorted(ran - set(CASES))
    if unknown or not ran:
        ap.error(f"--cases: unknown {unknown}; known: {', '.join(CASES)}")
    if os.geteuid() != 0:
        print("faults.py: the testbed needs root", file=sys.stderr)
        return 2
    env = dict(os.environ, CLAVIS_TESTBED_TESTS="1", CLAVIS_FAULT_RUNS=str(args.runs))
    with tempfile.TemporaryDirectory(prefix="clavis-faults-") as tmp:
        junit = Path(tmp) / "junit.xml"
        cp = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             f"--junitxml={junit}", *pytest_args(ran)],
            cwd=ROOT, env=env, check=False, timeout=4 * 3600,
        )  # fmt: skip
        if not junit.is_file():
            print(f"faults.py: pytest wrote no report (exit {cp.returncode})", file=sys.stderr)
            return 1
        cases = parse_junit(junit.read_text())
    info = machine()
    for name in ran:
        cases[name].measured = str(info["date"])
    results = ROOT / "bench" / "results" / "migration-faults.json"
    if results.is_file():
        old = json.loads(results.read_text())
        merge(cases, old.get("cases", {}), str(old.get("machine", {}).get("date", "")), ran)
    body = (
        "## Migration fault matrix (`bench/migration/faults.py`)\n\n"
        f"{describe(info)}\n\n"
        "Each case is a fault test run 10 times on the testbed: those of "
        "`tests/integration/test_migrator_faults.py` move a node with a running batch job "
        "between two hosts of a rack (the run's wall time includes starting the agents, "
        "the job and waiting for it to end); the clavisd-killed case of "
        "`tests/integration/test_demo.py` applies a plan of clavisd's to two streaming "
        "jobs on the demo's stack (its time includes classifying the jobs and waiting for "
        "them to end; its first run also holds the demo scenario its fixture runs "
        "first, about 100 s). A run ended well when every check held: the container running "
        "exactly once, the job's lines all written once (in the fencing case, once but "
        "for the stretch the fenced copy wrote before its fence, written again from the "
        "dump) and one uninterrupted COMPLETED run in `sacct`, no images left on either "
        "host, the agents' records (and clavisd's plan and its monitors' view) saying "
        "what happened.\n\n" + table(cases)
    )
    print(body)
    if not args.no_write:
        write_json(
            results,
            {"machine": info, "runs_per_case": args.runs,
             "cases": {k: asdict(v) for k, v in cases.items()}},
        )  # fmt: skip
        write_section(ROOT / "docs" / "benchmarks.md", SECTION, body)
    failed = sum(len(cases[c].failures) for c in ran)
    return 1 if failed or cp.returncode != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
