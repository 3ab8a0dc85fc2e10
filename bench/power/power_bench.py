"""Energy over a scripted day of load, power management on vs off (issue 17).

    python bench/power/power_bench.py [--hour-s 12] [--no-write | --render]

Root only; holds the testbed tests' lock (tests/integration/conftest.py), and `make
bench-power` runs it under the bench lock too. Both modes run in one invocation on a
fresh default testbed (2 racks x 2 hosts x 2 nodes) each:

- off: `clavis-testbed up --stack` (every host stays on, every node stays up);
- on: `clavis-testbed up --power-save` (Slurm suspends idle nodes through Clavis's
  programs, clavisd powers emptied hosts off and on through their BMCs; the first host
  stays on), started once the idle cluster has powered down.

The day: 24 hours of HOUR_S seconds each; at the start of hour h, PROFILE[h] one-node
jobs are submitted, each `sleep`ing for the hour (no core busy: the hosts' watts are
their idle or standby watts, so the energy difference is what powering off saves). Each
host's watts are read from its BMC (`ipmitool dcmi power reading`, from the host's netns)
every SAMPLE_S seconds and integrated (trapezoids) over the day. Each job writes its start
time; its start delay is start minus submission, and the delay power management adds is
the difference between the same job (hour, index) in the two modes.

Results: bench/results/power.json and the power section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import fcntl
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report import describe, machine, write_json, write_section

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "deploy" / "testbed" / "clavis-testbed"
RUN = Path("/run/clavis-testbed")
WORK = RUN / "shared" / "power-bench"
LOCK = Path("/run/lock/clavis-testbed-tests.lock")  # the one conftest.py takes
LOCK_WAIT_S = 3600.0
SECTION = "power-bench"
SAMPLE_S = 2.0
RESUME_TIMEOUT_S = 60.0  # deploy/testbed/ctb/powersave.py
# jobs per hour over the day (8 nodes): a quiet night, a morning ramp, a full working day
PROFILE = (1, 1, 1, 1, 1, 1, 2, 4, 6, 8, 8, 8, 8, 8, 8, 8, 8, 6, 4, 3, 2, 2, 1, 1)
LOW_HOURS = range(1, 6)  # the night, once settled: the load fits the host kept on


class BenchError(Exception):
    """A run that cannot be measured."""


def take_lock() -> int:
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise BenchError(f"{LOCK} stayed taken for {LOCK_WAIT_S:.0f}s") from None
            time.sleep(2.0)


def tb(*args: str, timeout: float = 600.0) -> str:
    cp = subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=timeout,
                        check=False)  # fmt: skip
    if cp.returncode != 0:
        raise BenchError(f"clavis-testbed {' '.join(args)}: {cp.stderr.strip()[-1500:]}")
    return cp.stdout


def slurm(*argv: str) -> str:
    return tb("exec", "--", *argv, timeout=60)


def dcmi_watts(host: dict[str, Any]) -> float | None:
    bmc = host["bmc"]
    password = Path(bmc["password_file"]).read_text().strip()
    cp = subprocess.run(
        ["nsenter", f"--net=/run/netns/{bmc['netns']}", "--", "ipmitool", "-I", "lanplus",
         "-H", bmc["address"], "-p", str(bmc["port"]), "-U", bmc["user"], "-P", password,
         "-C", "3", "dcmi", "power", "reading"],
        capture_output=True, text=True, timeout=20, check=False,
    )  # fmt: skip
    m = re.search(r"Instantaneous power reading:\s+(\d+) Watts", cp.stdout)
    return float(m.group(1)) if m else None


class Meter:
    """Every host's BMC watts every SAMPLE_S seconds, in a thread: (time, {host: W})."""

    def __init__(self, hosts: list[dict[str, Any]]) -> None:
        self.hosts = hosts
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.time()
            got: dict[str, float] = {}
            threads = [threading.Thread(target=self._read, args=(h, got)) for h in self.hosts]
            for th in threads:
                th.start()
            for th in threads:
                th.join(timeout=25)
            if len(got) == len(self.hosts):
                self.samples.append((t, got))
            self._stop.wait(max(0.0, SAMPLE_S - (time.time() - t)))

    @staticmethod
    def _read(h: dict[str, Any], into: dict[str, float]) -> None:
        w = dcmi_watts(h)
        if w is not None:
            into[h["name"]] = w

    def __enter__(self) -> Meter:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def energy_wh(self, t0: float, t1: float) -> tuple[float, float]:
        """(watt-hours of all hosts between t0 and t1, mean watts): trapezoids between
        successive samples, each cut to the part inside [t0, t1]."""
        pts = [(t, sum(w.values())) for t, w in self.samples]
        joules = 0.0
        for (ta, wa), (tb_, wb) in itertools.pairwise(pts):
            lo, hi = max(ta, t0), min(tb_, t1)
            if hi > lo:
                joules += (hi - lo) * (wa + wb) / 2
        if not pts or pts[0][0] > t0 + SAMPLE_S * 2 or pts[-1][0] < t1 - SAMPLE_S * 2:
            raise BenchError(f"the watt samples do not cover {t0:.0f}-{t1:.0f}")
        return joules / 3600, joules / (t1 - t0)


def wait_powered_down(st: dict[str, Any], timeout: float = 120.0) -> float:
    """Seconds until every node but the first host's is `idle~` and those hosts are off."""
    first = st["hosts"][0]["name"]
    others = [h for h in st["hosts"] if h["name"] != first]
    nodes = [c["name"] for h in others for c in h["containers"]]
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        states = dict(line.split() for line in slurm("sinfo", "-N", "-h", "-o", "%N %T")
                      .splitlines() if line.strip())  # fmt: skip
        off = all((RUN / "bmc" / h["name"] / "power").read_text().strip() == "0" for h in others)
        if off and all(states.get(n) == "idle~" for n in nodes):
            return time.monotonic() - t0
        time.sleep(1.0)
    raise BenchError(f"the idle cluster did not power down within {timeout:.0f}s")


def run_day(mode: str, hour_s: float) -> dict[str, Any]:
    tb("down")
    tb("up", "--power-save" if mode == "on" else "--stack", timeout=900)
    st = json.loads(tb("status", "--json"))
    settle = wait_powered_down(st) if mode == "on" else 0.0
    WORK.mkdir(parents=True, exist_ok=True)
    submitted: dict[str, float] = {}
    with Meter(st["hosts"]) as meter:
        time.sleep(SAMPLE_S)
        day0 = time.time()
        for hour, jobs in enumerate(PROFILE):
            at = day0 + hour * hour_s
            time.sleep(max(0.0, at - time.time()))
            for i in range(jobs):
                name = f"{mode}-h{hour:02d}-{i}"
                t = time.time()
                slurm("sbatch", "-N1", "-n1", "-J", name, "-o", f"{WORK}/{name}.out", "--wrap",
                      f"date +%s.%N > {WORK}/{name}.start; sleep {hour_s:g}")  # fmt: skip
                submitted[name] = t
        day1 = day0 + len(PROFILE) * hour_s
        time.sleep(max(0.0, day1 + SAMPLE_S * 1.5 - time.time()))
        total_wh, total_w = meter.energy_wh(day0, day1)
        _, low_w = meter.energy_wh(day0 + LOW_HOURS[0] * hour_s,
                                        day0 + (LOW_HOURS[-1] + 1) * hour_s)  # fmt: skip
        hourly = [round(meter.energy_wh(day0 + h * hour_s, day0 + (h + 1) * hour_s)[1], 1)
                  for h in range(len(PROFILE))]  # fmt: skip
    deadline = time.monotonic() + RESUME_TIMEOUT_S + 60
    while time.monotonic() < deadline and not all(
        (WORK / f"{n}.start").exists() for n in submitted
    ):
        time.sleep(1.0)
    delays = {n: float((WORK / f"{n}.start").read_text()) - t
              for n, t in submitted.items() if (WORK / f"{n}.start").exists()}  # fmt: skip
    log = RUN / "log" / "clavis-slurm-power.log"
    program_lines = log.read_text().splitlines() if log.exists() else []
    tb("down")
    return {
        "mode": mode,
        "settle_s": round(settle, 1),
        "energy_wh": round(total_wh, 3),
        "mean_w": round(total_w, 1),
        "low_load_mean_w": round(low_w, 1),
        "hourly_mean_w": hourly,
        "jobs": len(submitted),
        "never_started": sorted(set(submitted) - set(delays)),
        "delays_s": {n: round(d, 2) for n, d in sorted(delays.items())},
        "resume_failures": sum("ok=False" in line for line in program_lines),
        "samples": len(meter.samples),
        "topology": st["topology"],
    }


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def summarise(off: dict[str, Any], on: dict[str, Any], topo: dict[str, Any]) -> dict[str, Any]:
    power = topo["power"]
    hosts = topo["racks_n"] * topo["hosts_per_rack"]
    floor = power["idle_w"] + power["standby_w"] * (hosts - 1)  # the kept host idle, others off
    added = [on["delays_s"][n.replace("off-", "on-", 1)] - d for n, d in off["delays_s"].items()
             if n.replace("off-", "on-", 1) in on["delays_s"]]  # fmt: skip
    return {
        "floor_w": floor,
        "low_load_vs_floor": round(on["low_load_mean_w"] / floor, 3),
        "energy_saved": round(1 - on["energy_wh"] / off["energy_wh"], 3),
        "added_delay_median_s": round(statistics.median(added), 2),
        "added_delay_p95_s": round(pct(added, 0.95), 2),
        "added_delay_max_s": round(max(added), 2),
        "delay_median_s": {
            m["mode"]: round(statistics.median(m["delays_s"].values()), 2) for m in (off, on)
        },
        "delay_p95_s": {
            m["mode"]: round(pct(list(m["delays_s"].values()), 0.95), 2) for m in (off, on)
        },
        "targets": {
            "low_load_within_10pct_of_floor": on["low_load_mean_w"] <= 1.1 * floor,
            "p95_added_delay_under_resume_timeout": pct(added, 0.95) < RESUME_TIMEOUT_S,
        },
    }


def render(doc: dict[str, Any]) -> str:
    off, on, s = doc["runs"]["off"], doc["runs"]["on"], doc["summary"]
    t = doc["targets_text"]
    low = f"hours {LOW_HOURS[0]}-{LOW_HOURS[-1]}"
    med, p95 = s["delay_median_s"], s["delay_p95_s"]
    lost = f"{len(off['never_started'])}, - | {len(on['never_started'])}, {on['resume_failures']}"
    return f"""## Power management over a day (`bench/power/power_bench.py`, issue 17)

`make bench-power` ({describe(doc["machine"])}; both modes in one run, {doc["hour_s"]:g} s
per "hour", {len(PROFILE)} hours, jobs per hour {list(PROFILE)}, each job sleeping its hour on
one node; default testbed, 4 hosts of idle {doc["topology"]["power"]["idle_w"]} W and
standby {doc["topology"]["power"]["standby_w"]} W; BMC watts read over DCMI every {SAMPLE_S:g} s
and integrated). Off: `up --stack`, every host on. On: `up --power-save` (Slurm
SuspendTime 10 s, ResumeTimeout {RESUME_TIMEOUT_S:g} s, the first host kept on; clavisd grace
3 s, min_on 10 s, min_off 3 s), started {on["settle_s"]} s after up, once the idle cluster
had powered down. One day per mode (energies are of that one day each; delays are medians
and percentiles over its {on["jobs"]} jobs); jobs sleep, so no core is busy and every host
reads its idle or its standby watts. The evening powers down late (hours 17 on near full
power): with 12 s hours each hour's jobs land on nodes other jobs left moments before, so
few nodes stay idle for SuspendTime (10 s), and a host goes off only once all its nodes have.

| | off | on |
|---|---|---|
| energy over the day (Wh) | {off["energy_wh"]} | {on["energy_wh"]} |
| mean watts | {off["mean_w"]} | {on["mean_w"]} |
| mean watts at low load ({low}) | {off["low_load_mean_w"]} | {on["low_load_mean_w"]} |
| job start delay, median / p95 (s) | {med["off"]} / {p95["off"]} | {med["on"]} / {p95["on"]} |
| jobs never started, resume failures | {lost} |

Energy saved over the day: {s["energy_saved"] * 100:.1f}%. Idle floor of the host that must
stay on (its idle watts, the others at standby): {s["floor_w"]} W; at low load the cluster drew
{s["low_load_vs_floor"]:.3f} x that ({t["floor"]}). Start delay added by power management, per
job (the same job in both modes): median {s["added_delay_median_s"]} s, p95
{s["added_delay_p95_s"]} s, max {s["added_delay_max_s"]} s ({t["delay"]}): a job on a
powered-down node waits for the resume (clavisd powers a host on and starts the
container, about 5 s here) and then for slurmctld's next check of configuring jobs (every
30 s in Slurm 22.05, docs/testbed.md, "Power saving"). Hourly mean watts, on:
{on["hourly_mean_w"]}; off: {off["hourly_mean_w"]}.
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hour-s", type=float, default=12.0, help="seconds per scripted hour")
    ap.add_argument("--no-write", action="store_true", help="print, do not write results")
    ap.add_argument(
        "--render",
        action="store_true",
        help="redraw the docs section from bench/results/power.json, run nothing",
    )
    args = ap.parse_args()
    if args.render:
        doc = json.loads((ROOT / "bench" / "results" / "power.json").read_text())
        write_section(ROOT / "docs" / "benchmarks.md", SECTION, render(doc))
        return 0
    if os.geteuid() != 0:
        print("power_bench: needs root (the testbed)", file=sys.stderr)
        return 1
    fd = take_lock()
    try:
        runs = {mode: run_day(mode, args.hour_s) for mode in ("off", "on")}
    except BenchError as exc:
        print(f"power_bench: {exc}", file=sys.stderr)
        subprocess.run([str(CLI), "down"], capture_output=True, timeout=600, check=False)
        return 1
    finally:
        os.close(fd)
    # the raw runs, kept should the summary fail (13 minutes of measuring)
    Path("/tmp/clavis-power-bench-runs.json").write_text(json.dumps(runs))
    topo = runs["on"].pop("topology")
    runs["off"].pop("topology")
    summary = summarise(runs["off"], runs["on"], topo)
    ok = summary["targets"]
    doc = {
        "machine": machine(),
        "hour_s": args.hour_s,
        "profile": list(PROFILE),
        "topology": topo,
        "runs": runs,
        "summary": summary,
        "targets_text": {
            "floor": "target within 10%: " + ("met" if ok["low_load_within_10pct_of_floor"]
                                               else "not met"),
            "delay": f"target under ResumeTimeout {RESUME_TIMEOUT_S:g} s: "
            + ("met" if ok["p95_added_delay_under_resume_timeout"] else "not met"),
        },
    }  # fmt: skip
    print(render(doc))
    if not args.no_write:
        write_json(ROOT / "bench" / "results" / "power.json", doc)
        write_section(ROOT / "docs" / "benchmarks.md", SECTION, render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
