"""select_clavis's own work per job test at 20,000 nodes (issue 15): normal and hostile
advice.

    python bench/plugin/plugin_bench.py [--nodes 20000] [--reps 201] [--builds plain,sanitized]
    python bench/plugin/plugin_bench.py --render   # redraw the section from the results

Builds `clavis_narrow_test` (slurm-plugin/select/clavis_narrow_test.c: the same advice
reader, watcher thread and narrowing select_clavis.so links) into a temporary
directory, once as built for slurmctld (-O2) and once with ASan and UBSan, and times,
for a node table of `--nodes` names, every one a candidate, the work the plugin adds to
a job test: the advice held from the watcher thread (a mutex), one lookup per
candidate node and both narrowed sets of a devil job (the worst case), while the thread
reads the file 3 times (it is changed twice): job tests during each reload, the first
after it (reported apart too) and --reps more. No job test reads or parses the file.
cons_tres's own time is not included: it is Slurm's, the same with or without the
plugin. Wall and CPU time of the timing thread are both reported: on a
shared machine the wall clock includes other processes' turns, the CPU time is the
plugin's work. Results go to
bench/results/plugin.json and the plugin section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report import describe, machine, write_json, write_section

ROOT = Path(__file__).resolve().parents[2]
MAX_BYTES = 4 << 20  # AdviceMaxBytes' default, as the driver reads it
GENERATED = "2026-11-23T12:00:00Z"
NOW = "1795435210"  # 10 s after GENERATED
JOBS = {"2-node devil": (2, 1), "1-node devil": (1, 1), "2-node unhinted": (2, 0)}
# Measured once, not by this script: the rack search before issue 15 (main at e3050a6,
# a linear scan of the racks seen so far for every node) ported unchanged onto
# clavis_narrow_test, same file, same machine.
BEFORE = (
    "Before (issue 15 item 10, main at e3050a6): the rack search compared each node's "
    "rack with every rack seen so far; with one rack per node a 2-node devil job test "
    "took 625 ms of CPU (5.2 s wall on the loaded machine) at 20,000 nodes, measured once "
    "with that search on the same driver and file.\n\n"
)


@dataclass
class Row:
    build: str  # "plain" (-O2, as the plugin) or "sanitized" (ASan + UBSan)
    advice: str
    job: str
    file_bytes: int
    verdict: str  # "read" or "refused"
    first_ms: float
    cpu_first_ms: float
    median_ms: float
    max_ms: float
    cpu_median_ms: float
    cpu_max_ms: float
    kept: int


def node_name(i: int, prefix: str = "n") -> str:
    return f"{prefix}{i:05d}"


def advice(rows: list[dict[str, str]], **changes: object) -> bytes:
    doc = {"schema_version": 2, "kind": "clavis.advice", "generated": GENERATED,
           "valid_s": 180, "nodes": rows, **changes}  # fmt: skip
    return json.dumps(doc, separators=(",", ":")).encode()


def normal(n: int) -> bytes:
    """Racks of 125 hosts of 8 nodes; a third of the hosts run a devil."""
    return advice([
        {"node": node_name(i), "host": f"h{i // 8:05d}", "rack": f"r{i // 1000:03d}",
         "contention": "ok" if i // 8 % 3 == 0 else "devil-free",
         "node_class": "devil" if i // 8 % 3 == 0 and i % 8 == 0 else "unknown"}
        for i in range(n)
    ])  # fmt: skip


def rack_per_node(n: int) -> bytes:
    """Every node its own host and rack: the case whose rack search was quadratic."""
    return advice([
        {"node": node_name(i), "host": f"h{i:05d}", "rack": f"r{i:05d}",
         "contention": "ok" if i % 3 == 0 else "devil-free", "node_class": "unknown"}
        for i in range(n)
    ])  # fmt: skip


def long_prefix(n: int) -> str:
    """The longest common name prefix for which the hostile file stays under the limit."""
    for width in range(100, 0, -1):
        if len(hostile_valid(n, "x" * width)) <= MAX_BYTES:
            return "x" * width
    return ""


def hostile_valid(n: int, prefix: str) -> bytes:
    """Valid advice as large as the size limit allows: names sharing a long prefix (so
    every comparison scans it), one host and rack each, every host unknown."""
    return advice([
        {"node": node_name(i, prefix), "host": node_name(i, "h" + prefix),
         "rack": node_name(i, "r" + prefix), "contention": "unknown",
         "node_class": "unknown"}
        for i in range(n)
    ])  # fmt: skip


def refused(n: int) -> dict[str, bytes]:
    """Files the reader refuses; a job test then costs the cached refusal."""
    rng = random.Random(15)
    good = rack_per_node(n)[: MAX_BYTES - 64]
    return {
        "random bytes (4 MiB)": rng.randbytes(MAX_BYTES),
        "nested 4 MiB deep": b"[" * MAX_BYTES,
        "truncated": good[: len(good) // 2],
        "NaN valid_s": good.replace(b'"valid_s":180', b'"valid_s":NaN'),
        "valid_s 1e308, far future": rack_per_node(n)
        .replace(b'"valid_s":180', b'"valid_s":1e308')
        .replace(GENERATED.encode(), b"9999-12-31T23:59:59Z"),
    }


BUILDS = {
    "plain": "-O2 -g",
    # as tests/slurm_plugin/test_sanitizers.py: any sanitizer report ends the run
    "sanitized": "-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer "
    "-fno-sanitize-recover=all",
}


def build(tmp: Path, kind: str) -> Path:
    out = tmp / kind
    subprocess.run(["make", "-C", str(ROOT / "slurm-plugin"), f"BUILD={out}",
                    f"CFLAGS={BUILDS[kind]}", f"{out}/clavis_narrow_test"],
                   check=True, capture_output=True, timeout=600)  # fmt: skip
    return out / "clavis_narrow_test"


def time_job(drv: Path, adv: Path, table: Path, job: str, reps: int) -> dict[str, float]:
    min_nodes, devil = JOBS[job]
    out = subprocess.run(
        [str(drv), "time", str(adv), NOW, str(table), str(min_nodes), str(devil), str(reps)],
        check=True, capture_output=True, text=True, timeout=600,
    ).stdout.split()  # fmt: skip
    return {k: float(v) for k, v in zip(out[0::2], out[1::2], strict=True)}


def verdict(drv: Path, adv: Path, table: Path) -> str:
    """The reader's verdict on the file: "read", or "refused: WHY"."""
    cmd = [str(drv), "narrow", str(adv), NOW, str(table), "2", "1", "0"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600).stdout
    if out.startswith("nothing: ") and not out.startswith("nothing: not narrower"):
        return "refused: " + out.removeprefix("nothing: ").strip()
    return "read"


def measure(drv: Path, adv: Path, table: Path, *, kind: str, name: str, reps: int) -> list[Row]:
    data = adv.read_bytes()
    read = verdict(drv, adv, table)
    rows = []
    # a refused file costs every job the same (the cached refusal): the worst job only
    for job in JOBS if read == "read" else list(JOBS)[:1]:
        t = time_job(drv, adv, table, job, reps)
        rows.append(Row(
            build=kind, advice=name, job=job, file_bytes=len(data), verdict=read,
            first_ms=t["first_us"] / 1e3, cpu_first_ms=t["cpu_first_us"] / 1e3,
            median_ms=t["median_us"] / 1e3, max_ms=t["max_us"] / 1e3,
            cpu_median_ms=t["cpu_median_us"] / 1e3, cpu_max_ms=t["cpu_max_us"] / 1e3,
            kept=int(t["kept"]),
        ))  # fmt: skip
    return rows


def table_md(rows: list[Row]) -> str:
    head = ("| build | advice | size | reader | job | first job test after a change, "
            "CPU ms | job test, CPU ms median / max | wall ms median / max | nodes kept |\n"
            "|---|---|---|---|---|---|---|---|---|\n")  # fmt: skip
    return head + "".join(
        f"| {r.build} | {r.advice} | {r.file_bytes / 2**20:.2f} MiB | {r.verdict} | {r.job} | "
        f"{r.cpu_first_ms:.1f} | {r.cpu_median_ms:.3f} / {r.cpu_max_ms:.3f} | "
        f"{r.median_ms:.3f} / {r.max_ms:.3f} | {r.kept} |\n"
        for r in rows
    )


def section(payload: dict[str, Any], builds: str) -> str:
    """The plugin section of docs/benchmarks.md from a run's results."""
    rows = [Row(**r) for r in payload["rows"]]
    n, reps, load = payload["nodes"], payload["reps"], payload["load_average"]
    worst_max = {b: max((r.cpu_max_ms for r in rows if r.build == b), default=0.0)
                 for b in ("plain", "sanitized")}  # fmt: skip
    return (
        "## select_clavis job test (`bench/plugin/plugin_bench.py`)\n\n"
        f"The work select_clavis.so adds to one job test at {n:,} nodes (all candidates): "
        "the advice held from the plugin's watcher thread, one lookup per candidate node, "
        "both narrowed sets of a devil job (the worst case), as "
        "`slurm-plugin/select/clavis_narrow_test.c` runs the plugin's own watcher and "
        "`clavis_narrow.c` (-O2); cons_tres's own time is Slurm's and not included. The "
        "thread reads each file 3 times (its mtime set anew twice) while job tests go on: "
        "median and maximum of every job test, those during each reload and the first after "
        f"it included ({reps} more after each); no job test reads or parses the file. "
        "CPU is the timing thread's CPU time; wall includes other processes' turns (load "
        f"average {load[0]:.1f} during the run, on a machine shared by other sessions). "
        "Refused files (the reader's verdict in the table) leave no advice: a job test "
        "takes the mutex and finds none.\n\n"
        + table_md(rows)
        + f"\nTarget: under 10 ms per job test; worst CPU median "
        f"{payload['worst_cpu_median_ms']:.2f} ms as built for slurmctld, "
        f"{payload['worst_cpu_median_ms_sanitized']:.2f} ms with ASan and UBSan (no "
        "sanitizer report in any run: one would have ended it); worst single job test "
        f"{worst_max['plain']:.2f} ms as built for slurmctld, {worst_max['sanitized']:.2f} ms "
        "with ASan and UBSan; the first job test after a change up to "
        f"{payload['worst_cpu_first_ms']:.1f} ms as built for slurmctld. Before the watcher "
        "thread (83483d5) that job test read and parsed the file itself: up to 67 ms of "
        "CPU for a 4 MiB file (plain build, 2026-11-23).\n\n"
        + BEFORE
        + describe(payload["machine"])
        + f"\n\nCommand: `python bench/plugin/plugin_bench.py --nodes {n} --reps {reps} "
        f"--builds {builds}`; "
        "raw results in `bench/results/plugin.json`."
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--nodes", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=201)
    ap.add_argument("--builds", default="plain,sanitized", help="plain and/or sanitized")
    ap.add_argument("--no-write", action="store_true", help="print, do not write results")
    ap.add_argument("--render", action="store_true",
                    help="redraw the section from the last results, run nothing")  # fmt: skip
    args = ap.parse_args()
    results = ROOT / "bench/results/plugin.json"
    if args.render:
        payload = json.loads(results.read_text())
        builds = ",".join(dict.fromkeys(r["build"] for r in payload["rows"]))
        write_section(ROOT / "docs/benchmarks.md", "plugin-bench", section(payload, builds))
        return 0
    n = args.nodes
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        drivers = {kind: build(tmp, kind) for kind in args.builds.split(",")}
        prefix = long_prefix(n)
        cases = {"normal (20 racks)": normal(n), "one rack per node": rack_per_node(n),
                 "hostile valid (long names, at the size limit)": hostile_valid(n, prefix),
                 **refused(n)}  # fmt: skip
        rows: list[Row] = []
        for name, data in cases.items():
            table = tmp / "nodes"
            hostile = name.startswith("hostile valid")
            table.write_text("".join(node_name(i, prefix if hostile else "n") + "\n"
                                     for i in range(n)))  # fmt: skip
            (tmp / "advice.json").write_bytes(data)
            for kind, drv in drivers.items():
                got = measure(drv, tmp / "advice.json", table, kind=kind, name=name,
                              reps=args.reps)  # fmt: skip
                rows += got
                print("\n".join(table_md(got).splitlines()[2:]), flush=True)
    worst = max((r.cpu_median_ms for r in rows if r.build == "plain"), default=0.0)
    worst_san = max((r.cpu_median_ms for r in rows if r.build == "sanitized"), default=0.0)
    # the first job test after a change (the thread read it meanwhile)
    first = max((r.cpu_first_ms for r in rows if r.build == "plain"), default=0.0)
    load = os.getloadavg()
    info = machine()
    payload = {"machine": info, "nodes": n, "reps": args.reps, "load_average": load,
               "target_ms": 10.0, "worst_cpu_median_ms": worst,
               "worst_cpu_median_ms_sanitized": worst_san, "worst_cpu_first_ms": first,
               "rows": [asdict(r) for r in rows]}  # fmt: skip
    if args.no_write:
        print(json.dumps(payload, indent=1))
        return 0
    write_json(results, payload)
    write_section(ROOT / "docs/benchmarks.md", "plugin-bench", section(payload, args.builds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
