"""Issue 17's acceptance on the testbed: Slurm's power saving and clavisd's host power
(`clavis-testbed up --power-save`, deploy/testbed/ctb/powersave.py).

From a fresh testbed: the idle nodes are suspended (`idle~`, POWERED_DOWN in `scontrol
show node`) and the hosts left empty are powered off through their BMCs (DCMI reads the
standby watts), all but the host kept on; a burst of one job per node fills the cluster,
Slurm resumes the nodes through clavisd, which powers hosts on, and every job starts
within ResumeTimeout of its submission; the burst drains and the cluster powers down
again; a second burst starts the same way. While jobs run, the host of every running
job's node is on (sampled every half second): no job runs on a host that is off. Then a
two-node job with one node up (the kept host's) and one powered down: the resume program
sends the node that is up as the job's running node (Slurm 22.05's SLURM_RESUME_FILE has
no nodes_alloc: scontrol gives the job's nodes), and clavisd starts the resumed node in
that node's rack. The programs sign with a power key. Every wait is bounded; the whole
test takes about two and a half minutes.

Runs after test_stack and test_demo (conftest.py): it takes down whatever testbed is up to
start its own, and takes it down at the end.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import tb

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy" / "testbed"))

from ctb import powersave

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not tb.is_root(), reason="the testbed needs root"),
]

JOB_S = 6  # each job sleeps this long
DOWN_S = 90.0  # idle -> suspended (SuspendTime 10 s) -> hosts off (grace 3 s), with slack
WORK = tb.RUN_DIR / "shared" / "power-test"
STORE = tb.RUN_DIR / "clavis" / "clavis.db"
LOGS = Path("/tmp/clavis-test-power-logs")


@pytest.fixture(scope="module")
def bed() -> Iterator[dict[str, Any]]:
    tb.tb("down", check=False)
    before = tb.snapshot()
    cp = tb.tb("up", "--power-save", check=False)
    try:
        assert cp.returncode == 0, cp.stderr[-3000:]
        st = tb.status()
        pids = [p["pid"] for p in st["processes"]]
        yield st
    finally:
        # the run's logs outlive down, for a failed run's post-mortem
        shutil.rmtree(LOGS, ignore_errors=True)
        with contextlib.suppress(OSError):
            shutil.copytree(tb.RUN_DIR / "log", LOGS)
        down = tb.tb("down", check=False)
        assert down.returncode == 0, down.stderr
    # down removes exactly what up --power-save created (hosts that were off, nodes in
    # time namespaces and the programs' files included)
    assert not tb.left_behind(before)
    assert not tb.live_pids(pids)


def _sinfo() -> dict[str, str]:
    out = tb.slurm(["sinfo", "-N", "-h", "-o", "%N %T"])
    return dict(line.split() for line in out.splitlines() if line.strip())


def _power(host: str) -> str:
    return (tb.RUN_DIR / "bmc" / host / "power").read_text().strip()


def _wait(what: str, pred: Any, timeout: float, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    last = pred()
    while not last and time.monotonic() < deadline:
        time.sleep(every)
        last = pred()
    assert last, f"{what}: not within {timeout:.0f}s"
    return last


def _powered_down(bed: dict[str, Any]) -> None:
    """Every node but the kept host's `idle~`, those hosts off at standby watts."""
    kept = bed["hosts"][0]["name"]
    others = [h for h in bed["hosts"] if h["name"] != kept]
    nodes = [c["name"] for h in others for c in h["containers"]]

    def down() -> bool:
        states = _sinfo()
        return all(states.get(n) == "idle~" for n in nodes) and all(
            _power(h["name"]) == "0" for h in others
        )

    _wait("nodes powered down and their hosts off", down, DOWN_S)
    standby = bed["topology"]["power"]["standby_w"]
    for h in others:
        w = _wait(f"{h['name']} at standby watts",
                  lambda h=h: tb.dcmi_watts(h) == standby or None, 15.0)  # fmt: skip
        assert w
        assert "off" in tb.ipmi(h, "chassis", "power", "status")
    for n in nodes:
        shown = tb.slurm(["scontrol", "show", "node", n])
        assert "POWERED_DOWN" in shown, shown
    kept_host = bed["hosts"][0]
    assert _power(kept) == "1"
    assert tb.dcmi_watts(kept_host) >= bed["topology"]["power"]["idle_w"]
    assert all(_sinfo()[c["name"]] == "idle" for c in kept_host["containers"])


def _burst(bed: dict[str, Any], tag: str) -> tuple[dict[str, float], set[str]]:
    """One job per node, submitted at once: a job array, one sbatch. (With one sbatch a
    job, a loaded machine took 1.5 s a submission: the first jobs ended before the last
    were queued, which then ran on their nodes, and some hosts never had to come on.)
    Returns each job's start delay (s) and the hosts seen on, after checking that every
    running job's host was on at every sample."""
    nodes = [c["name"] for h in bed["hosts"] for c in h["containers"]]
    WORK.mkdir(parents=True, exist_ok=True)
    script = f"date +%s.%N > {WORK}/{tag}-$SLURM_ARRAY_TASK_ID.start; sleep {JOB_S}"
    t = time.time()
    out = tb.slurm(["sbatch", f"--array=0-{len(nodes) - 1}", "-N1", "-n1", "-J", tag,
                    "-o", f"{WORK}/{tag}-%a.out", "--wrap", script])  # fmt: skip
    assert "Submitted batch job" in out, out
    array = out.split()[-1]
    submitted = [f"{tag}-{i}" for i in range(len(nodes))]
    where = tb.RUN_DIR / "placement.json"
    off_seen: list[str] = []
    seen_on: set[str] = set()
    deadline = time.monotonic() + powersave.RESUME_TIMEOUT + 30
    while time.monotonic() < deadline:
        seen_on |= {h["name"] for h in bed["hosts"] if _power(h["name"]) == "1"}
        running = tb.slurm(["squeue", "-h", "-t", "R", "-o", "%i %N"]).split("\n")
        for line in running:
            parts = line.split()
            if len(parts) == 2 and parts[0].startswith(f"{array}_"):
                host = tb.host_of(parts[1])
                if _power(host) != "1":
                    off_seen.append(f"{parts[0]} on {parts[1]} of {host} (off)")
        if all((WORK / f"{n}.start").exists() for n in submitted):
            break
        time.sleep(0.5)
    assert where.exists()
    assert not off_seen, off_seen
    missing = [n for n in submitted if not (WORK / f"{n}.start").exists()]
    assert not missing, f"never started: {missing}; sinfo {_sinfo()}\n{_why_not(array, missing)}"
    delays = {n: float((WORK / f"{n}.start").read_text()) - t for n in submitted}
    return delays, seen_on


def _why_not(array: str, names: list[str]) -> str:
    """What Slurm and the power programs said of a burst whose jobs did not all start:
    the queue (state, reason, begin time), slurmctld's lines naming the array's jobs, the
    jobs' output, the power log's tail (a failed run's message is all CI shows)."""
    queue = tb.slurm(["squeue", "-h", "-o", "%i %T %r %S %N"])
    ctld = (tb.RUN_DIR / "log" / "slurmctld.log").read_text(errors="replace").splitlines()
    # an array task is "JobId=A_T(N)" in most lines, "JobId=N" in some (abort launch)
    ids = set(re.findall(rf"JobId={array}_\d+\((\d+)\)", "\n".join(ctld)))
    events = ("now responding", "resume", "requeu", "abort", "reboot")  # any case
    named = re.compile(rf"JobId=({array}_|({'|'.join(ids) or 'none'})\b)")
    said = [line for line in ctld if "select/cons_tres" not in line
            and (named.search(line) or any(e in line.lower() for e in events))]  # fmt: skip
    power = powersave.LOG.read_text(errors="replace").splitlines()
    outs = [f"{n}.out: {(WORK / f'{n}.out').read_text(errors='replace')[-300:]!r}"
            for n in names if (WORK / f"{n}.out").exists()]  # fmt: skip
    return "\n".join(["squeue:", queue, *outs, "slurmctld:", *said[-40:],
                      "power log:", *power[-20:]])  # fmt: skip


def _events() -> list[tuple[str, str, str]]:
    with sqlite3.connect(f"file:{STORE}?mode=ro", uri=True, timeout=5) as db:
        rows = db.execute("SELECT host, action, result FROM power_events ORDER BY id")
        return [(str(h), str(a), str(r)) for h, a, r in rows.fetchall()]


def test_bursts_power_hosts_on_and_drains_power_them_off(bed: dict[str, Any]) -> None:
    t0 = time.monotonic()
    kept = bed["hosts"][0]["name"]
    _powered_down(bed)
    first, on = _burst(bed, "a")
    # the burst needed every core: every host that was off came on for it (the first
    # jobs may end, and their hosts go off again, before the last ones start)
    assert on == {h["name"] for h in bed["hosts"]}, on
    _wait("the first burst finished",
          lambda: not tb.slurm(["squeue", "-h", "-o", "%i"]).strip(), JOB_S + 60)  # fmt: skip
    _powered_down(bed)
    second, on = _burst(bed, "b")
    assert on == {h["name"] for h in bed["hosts"]}, on
    delays = {**first, **second}
    late = {n: round(d, 1) for n, d in delays.items() if d > powersave.RESUME_TIMEOUT}
    assert not late, f"started later than ResumeTimeout {powersave.RESUME_TIMEOUT}s: {late}"
    events = _events()
    for h in bed["hosts"][1:]:
        mine = [(a, r) for host, a, r in events if host == h["name"]]
        assert mine.count(("off", "ok")) >= 2, (h["name"], mine)
        assert mine.count(("on", "ok")) >= 2, (h["name"], mine)
    assert not [e for e in events if e[0] == kept and e[1] in ("soft", "off")], events
    log = powersave.LOG.read_text()
    assert "action=resume" in log and "ok=False" not in log, log[-2000:]
    assert "SLURM_RESUME_FILE job" not in log, log[-2000:]  # no garbage found in it
    assert time.monotonic() - t0 < 240, "the power cycle test took too long"
    print(f"start delays (s): {sorted(round(d, 1) for d in delays.values())}")


def test_a_resumed_node_starts_in_the_rack_of_its_jobs_running_node(bed: dict[str, Any]) -> None:
    kept = bed["hosts"][0]
    up = kept["containers"][0]["name"]  # never suspended (SuspendExcNodes)
    # a node whose home is in the other rack: clavisd, not its name, says where it runs
    far = next(h for h in bed["hosts"] if h["rack"] != kept["rack"])["containers"][0]["name"]
    # jobs a failed test above left queued would resume nodes during the wait below
    left = tb.slurm(["squeue", "-h", "-o", "%i"]).split()
    if left:
        tb.slurm(["scancel", *left])
    _powered_down(bed)
    start = WORK / "pair.start"
    t = time.time()
    out = tb.slurm(["sbatch", "-N2", "-n2", "-w", f"{up},{far}", "-J", "pair",
                    "-o", f"{WORK}/pair.out", "--wrap", f"date +%s.%N > {start}"])  # fmt: skip
    assert "Submitted batch job" in out, out
    _wait("the two-node job started", start.exists, powersave.RESUME_TIMEOUT + 30)
    assert float(start.read_text()) - t < powersave.RESUME_TIMEOUT
    racks = {h["name"]: h["rack"] for h in bed["hosts"]}
    # the kept host is full (its own two nodes), so not the same host: the same rack
    assert racks[tb.host_of(far)] == kept["rack"], (far, tb.host_of(far))
    clavisd_log = (tb.RUN_DIR / "log" / "clavisd.log").read_text()
    assert f"node={far} host={tb.host_of(far)} near 1 running node(s) of the job" in clavisd_log
    key = powersave.key_file()
    assert 'role = "power"' in key.read_text() and key.stat().st_mode & 0o777 == 0o600
