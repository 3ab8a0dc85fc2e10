"""Testbed up time (issue 5): `clavis-testbed up` from a cold and from a warm cache.

    python bench/testbed/testbed_bench.py [--warm-runs 3] [--no-write | --render]

Root only. The cold run gets a new, empty cache directory (the testbed reads its cache
from CLAVIS_CACHE), so `up` fetches CRIU 4.2.1's source from Debian sid, builds it,
builds the container root filesystem and then the cluster; the warm runs reuse that
cache. The machine's own /var/cache/clavis is never read or moved, so a test session
that starts meanwhile still finds its cache; the bench's cache is removed at the end.
Each `up` is timed until it returns (every Slurm node idle), checked with `status
--json`, and followed by a timed `down`. The bench holds the testbed tests' lock
(tests/integration/conftest.py) so no test session builds a testbed meanwhile.
Results go to bench/results/testbed.json and the testbed section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report import describe, machine, write_json, write_section

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "deploy" / "testbed" / "clavis-testbed"
INSTALL = ROOT / "deploy" / "testbed" / "install.sh"
STATE = Path("/run/clavis-testbed/state.json")
LOCK = Path("/run/lock/clavis-testbed-tests.lock")  # the one conftest.py takes
LOCK_WAIT_S = 3600.0
UP_TIMEOUT_S = 1800.0  # a cold up builds CRIU: minutes at most
SECTION = "testbed-bench"


class BenchError(Exception):
    """A run that cannot be measured (the testbed would not come up or go down)."""


def take_lock() -> int:
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + LOCK_WAIT_S
    waited = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise BenchError(f"{LOCK} still held after {LOCK_WAIT_S:.0f} s") from None
            if not waited:
                print(f"waiting for {LOCK} (a testbed test session runs)", flush=True)
                waited = True
            time.sleep(2.0)


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def _timed(
    argv: list[str], env: dict[str, str], timeout: float
) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.monotonic()
    cp = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return time.monotonic() - t0, cp


def _seconds(pattern: str, text: str) -> float | None:
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


def _down(env: dict[str, str]) -> bool:
    cp = subprocess.run(
        [str(CLI), "down"], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    return cp.returncode == 0


def one_up(case: str, env: dict[str, str]) -> dict[str, Any]:
    """Time `up` (to every node idle), check the result, time `down`."""
    load = load_average()
    wall, up = _timed([str(CLI), "up"], env, UP_TIMEOUT_S)
    if up.returncode != 0:
        _down(env)
        raise BenchError(f"{case}: up exited {up.returncode}:\n{up.stderr[-3000:]}")
    status = json.loads(
        subprocess.run(
            [str(CLI), "status", "--json"], env=env, capture_output=True, text=True,
            timeout=120, check=False,
        ).stdout
    )  # fmt: skip
    nodes = {c["name"]: c["slurm"] for h in status["hosts"] for c in h["containers"]}
    down_s, down = _timed([str(CLI), "down"], env, 300)
    if down.returncode != 0:
        raise BenchError(f"{case}: down exited {down.returncode}:\n{down.stderr[-3000:]}")
    if not status["up"] or set(nodes.values()) != {"idle"}:
        raise BenchError(f"{case}: not every node idle after up: {status['problems']} {nodes}")
    return {
        "case": case,
        "wall_s": round(wall, 2),
        # what up says of itself: artefacts (CRIU, rootfs, BMC module) and the whole build
        "artefacts_s": _seconds(r"artefacts ready \(([\d.]+)s\)", up.stderr),
        "up_reported_s": _seconds(r"up in ([\d.]+)s", up.stderr),
        "down_s": round(down_s, 2),
        "nodes": len(nodes),
        "hosts": len(status["hosts"]),
        "load_average_before": load,
        "criu": status["criu"],
    }


def install_check() -> dict[str, Any]:
    """deploy/testbed/install.sh as `make testbed-install` runs it (packages present)."""
    wall, cp = _timed(["bash", str(INSTALL)], dict(os.environ), 1800)
    if cp.returncode != 0:
        raise BenchError(f"install.sh exited {cp.returncode}:\n{cp.stderr[-2000:]}")
    m = re.search(r"(\d+) packages missing", cp.stdout)
    return {"wall_s": round(wall, 2), "installed_packages": int(m.group(1)) if m else 0}


def tool_versions() -> dict[str, str]:
    out = {}
    for name, argv in (("slurm", ["slurmctld", "-V"]), ("lxc", ["lxc-start", "--version"])):
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        out[name] = (cp.stdout or cp.stderr).strip()
    return out


def run(warm_runs: int) -> dict[str, Any]:
    if STATE.exists():
        raise BenchError(f"{STATE} exists: a testbed is up; bring it down first")
    install = install_check()
    cache = Path(tempfile.mkdtemp(prefix="clavis-bench-cache-", dir="/var/cache"))
    env = {**os.environ, "CLAVIS_CACHE": str(cache)}
    try:
        runs = [one_up("cold", env)]
        built = sorted(p.name for p in cache.iterdir())
        if not runs[0]["criu"].startswith(str(cache)):
            raise BenchError(f"cold up used CRIU outside the bench cache: {runs[0]['criu']}")
        runs += [one_up("warm", env) for _ in range(warm_runs)]
    finally:
        # the cache goes only when no testbed of ours can still be using its rootfs
        if not STATE.exists() or _down(env):
            shutil.rmtree(cache, ignore_errors=True)
        else:
            print(f"testbed bench: down failed; {cache} kept", file=sys.stderr)
    warm = [r["wall_s"] for r in runs if r["case"] == "warm"]
    return {
        "runs": runs,
        "cold_wall_s": runs[0]["wall_s"],
        "warm_median_wall_s": round(statistics.median(warm), 2) if warm else None,
        "cold_cache_built": built,
        "install_present": install,
        "topology": "default: 2 racks x 2 hosts x 2 containers",
        "tools": tool_versions(),
        "machine": machine(),
    }


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _row(r: dict[str, Any]) -> str:
    what = (
        "empty cache: CRIU 4.2.1 source fetched from sid and built, rootfs skeleton built, "
        "then the cluster"
        if r["case"] == "cold"
        else "CRIU and rootfs cached"
    )
    return (
        f"| {r['case']} | {what} | {_s(r['wall_s'])} | {_s(r['artefacts_s'])} | "
        f"{_s(r['up_reported_s'])} | {_s(r['down_s'])} | {r['load_average_before']:.2f} |"
    )


def _reflow(markdown: str) -> str:
    """Fill prose paragraphs to 88 columns; headings and tables stay as they are."""
    out = []
    for para in markdown.strip().split("\n\n"):
        if para.startswith(("#", "|")):
            out.append(para)
        else:
            out.append(textwrap.fill(" ".join(para.split()), 88, break_on_hyphens=False))
    return "\n\n".join(out) + "\n"


def section(res: dict[str, Any]) -> str:
    rows = "\n".join(_row(r) for r in res["runs"])
    cold = res["runs"][0]
    inst = res["install_present"]
    if inst["installed_packages"]:
        inst_text = (
            f"`deploy/testbed/install.sh` installed {inst['installed_packages']} missing "
            f"packages first ({_s(inst['wall_s'])})."
        )
    else:
        inst_text = (
            f"`deploy/testbed/install.sh` (`make testbed-install`) with every package "
            f"present: {_s(inst['wall_s'])}."
        )
    tools = res["tools"]
    return _reflow(f"""## Testbed up time (`bench/testbed/testbed_bench.py`)

`deploy/testbed/clavis-testbed up` with the default topology (2 racks x 2 hosts x 2
containers = {cold["nodes"]} Slurm nodes, {cold["hosts"]} BMCs), timed from the command's start
until it returns, which is when every node is `idle` in `sinfo`; then `down`, timed too.
The cold run gets a new, empty cache directory (`CLAVIS_CACHE`), so it includes
fetching CRIU 4.2.1's source from Debian sid (apt), building it and building the
container rootfs; the warm runs reuse that cache. "artefacts" is the part `up` reports
for CRIU, the rootfs, the DCMI module and the MPI_Finalize wrapper; "up says" is its
own total (it starts after Python and the state checks). Load average (1 min) before
each run: other work on the machine shares its 2 cores.

| case | what it includes | wall time | artefacts | up says | down | load before |
|---|---|---|---|---|---|---|
{rows}

Cold {_s(res["cold_wall_s"])}; warm {_s(res["warm_median_wall_s"])} (median of
{len(res["runs"]) - 1} runs). {inst_text} Installing the testbed's packages on a
machine without them (22 packages) took 41 s when measured by hand on 2026-11-22; the
bench does not repeat that, as it would have to remove the machine's packages.

{describe(res["machine"])} Kernel {res["machine"]["kernel"]}; Slurm:
{tools["slurm"]}; LXC {tools["lxc"]}.
Command (as root): `make bench-testbed`
(`python bench/testbed/testbed_bench.py --warm-runs {len(res["runs"]) - 1}`); raw results
in `bench/results/testbed.json`.
""")


def bench_main(
    name: str,
    *,
    description: str | None,
    results: Path,
    section_name: str,
    run_bench: Callable[[int], dict[str, Any]],
    render: Callable[[dict[str, Any]], str],
    warm_runs: int,
) -> int:
    """The command line both testbed benches share: run under the testbed lock as root,
    print the figures, and write the results file and the docs section (or only
    re-render the section from saved results)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--warm-runs", type=int, default=warm_runs)
    p.add_argument("--no-write", action="store_true", help="print only (for quick checks)")
    p.add_argument(
        "--render", action="store_true", help="only rewrite the docs section from the results"
    )
    args = p.parse_args()
    docs = ROOT / "docs" / "benchmarks.md"
    if args.render:
        write_section(docs, section_name, render(json.loads(results.read_text())))
        return 0
    if os.geteuid() != 0:
        print(f"{name}: must run as root", file=sys.stderr)
        return 1
    try:
        fd = take_lock()
        try:
            res = run_bench(max(0, args.warm_runs))
        finally:
            os.close(fd)
    except (BenchError, subprocess.TimeoutExpired) as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({k: v for k, v in res.items() if k != "machine"}, indent=1))
    if not args.no_write:
        write_json(results, res)
        write_section(docs, section_name, render(res))
    return 0


def main() -> int:
    results = ROOT / "bench" / "results" / "testbed.json"
    return bench_main(
        "testbed bench", description=__doc__, results=results, section_name=SECTION,
        run_bench=run, render=section, warm_runs=3,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
