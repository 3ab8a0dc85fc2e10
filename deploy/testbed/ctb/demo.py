"""`make demo` on the testbed: issue 13's acceptance scenario, narrated.

A fresh testbed with the Clavis stack (`clavis-testbed up --stack`), then plain `sbatch`
jobs only: two memory-streaming jobs (`stream-triad`), two compute-bound ones (`crunch`)
and a 2-node MPICH job (`mpi-halo`), the programs of deploy/testbed/demo built into the
shared directory. It waits (every wait bounded) until every host reports, every job is
linked to its node containers in clavisd's /containers, and clavisd has classed the
streaming jobs devils and the others turtles (7 of the last 10 intervals, DINO, thesis
§3.3.3); shows the advice select/clavis reads (as the slurm user) and slurmctld's log
lines about it; ends one streaming job and submits another of the same application,
unhinted, and shows where select/clavis put it (cons_tres would take the first idle
node, on a devil's host); has a user pin one more streaming job beside the first (`sbatch
-w`), so two devils share a host; then asks clavisd for a repacking plan (`clavis repack
--dry-run`), shows `--apply` failing clearly with the migrator agents stopped, and
applies it with them (demo_moves.py: the nodes move with their jobs, Slurm sees nothing,
clavisd's P, D, C afterwards match the plan's). The demo's jobs are cancelled at the
end; the cluster stays up.

Standard library only, like the testbed; clavisd's API is read with the repository's
venv (signed with the admin key, as root on the head may), and `clavis repack` is the
venv's. tests/integration/test_demo.py runs the same scenario and checks its outcome
(`--json`).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import demo_moves, paths, placement, stack

CLI = paths.HERE / "clavis-testbed"
SOURCES = paths.HERE / "demo"
DEMO_DIR = paths.SHARED / "demo"
HEAD_NETNS = "ctb-core"
# long enough for the whole scenario; the demo cancels its jobs when it ends
JOB_SECONDS = 300
JOB_LIMIT_MIN = 8
# per array: 3 x 16 MiB sweep 48 MiB, beyond the machine's LLC (32 MiB here), so an LRU
# cache keeps none of it from one sweep to the next; and a streaming node's CRIU images
# stay near 55 MB, which a move carries over the 100 Mbit/s core link in about 5 s
STREAM_MIB = 16
LINK_S = 60.0
CLASS_S = 120.0
RUN_S = 60.0
ADVICE_S = 30.0  # clavisd rewrites the advice every valid_s / 3 (at most 10 s)
POLL_S = 0.5  # every wait below polls this often, within its own bound
JOBS = (  # tag, job name (= application), program, nodes; submitted in this order
    ("stream-a", "stream-triad", "stream-triad", 1),
    ("stream-b", "stream-triad", "stream-triad", 1),
    ("crunch-a", "crunch", "crunch", 1),
    ("mpi", "mpi-halo", "mpi-halo", 2),
    ("crunch-b", "crunch", "crunch", 1),
)
EXPECTED = {"stream-triad": "devil", "crunch": "turtle", "mpi-halo": "turtle"}
# Each host gets a core no node uses: on a full cluster every move waits for another
# and clavisd's planner can order none of them (docs/testbed.md, "Moving nodes")
SPARE_CPUS = 1
Say = Callable[[str], None]

_SIGNED_GET = """import sys, time, urllib.request
from pathlib import Path
from clavis_contracts.keys import load_keys
from clavis_contracts.signing import sign
base, keys_file, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
key = next(k for k in load_keys(Path(keys_file)) if k.role == "admin")
out = []
for path in paths:
    headers = sign(key.secret_bytes, "GET", path, b"", time.time(), key_id=key.id)
    req = urllib.request.Request(base + path, headers=headers)
    with urllib.request.urlopen(req, timeout=10) as r:
        out.append(r.read().decode())
sys.stdout.write("\\x1e".join(out))
"""


class DemoError(Exception):
    """A step of the scenario did not happen within its bound; the message says which."""


@dataclass
class Job:
    tag: str
    name: str
    program: str
    nodes_wanted: int
    id: str = ""
    nodes: list[str] = field(default_factory=list)
    klass: str | None = None
    seconds: int = JOB_SECONDS  # how long its program runs


@dataclass
class Outcome:
    """What the scenario saw, for the narration's end and for the test (--json)."""

    up_s: float = 0.0
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    jobs: list[Job] = field(default_factory=list)
    linked_s: float | None = None
    classed_s: float | None = None
    containers: dict[str, dict[str, Any]] = field(default_factory=dict)
    advice: dict[str, Any] = field(default_factory=dict)
    advice_age_s: float | None = None
    ctld_advice_lines: list[str] = field(default_factory=list)
    moves: demo_moves.Moves | None = None
    new_job: Job | None = None
    new_job_host: str | None = None
    devil_hosts: list[str] = field(default_factory=list)
    cons_tres_node: str | None = None
    cons_tres_host: str | None = None
    ctld_job_lines: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


def _run(
    argv: list[str], timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                        stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    if check and cp.returncode != 0:
        raise DemoError(
            f"{' '.join(argv)} -> {cp.returncode}\n{cp.stdout[-2000:]}{cp.stderr[-2000:]}"
        )
    return cp


def testbed(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return _run([str(CLI), *args], timeout=timeout)


def slurm(*argv: str, timeout: float = 60) -> str:
    return testbed("exec", "--", *argv, timeout=timeout).stdout


def status() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_run([str(CLI), "status", "--json"], check=False).stdout)
    return data


def api(st: dict[str, Any], *paths_: str) -> list[Any]:
    """GET clavisd API paths, signed with the admin key, from the head's netns."""
    c = st["stack"]["clavisd"]
    py = str(stack.VENV / "bin" / "python")
    argv = ["nsenter", f"--net=/run/netns/{c['netns']}", "--", py, "-c", _SIGNED_GET,
            c["url"], c["agent_keys_file"], *[f"/api/v1{p}" for p in paths_]]  # fmt: skip
    out = _run(argv, timeout=60).stdout
    return [json.loads(part) for part in out.split("\x1e")]


def _host(node: str) -> str:
    return placement.host_of(node)  # where it runs now: migrations move nodes


@contextlib.contextmanager
def timed(seconds: dict[str, float], phase: str) -> Iterator[None]:
    """Add the wall time of the block to seconds[phase] (the demo's phase breakdown)."""
    t0 = time.monotonic()
    try:
        yield
    finally:
        seconds[phase] = round(seconds.get(phase, 0.0) + time.monotonic() - t0, 1)


# ---------------------------------------------------------------- steps


def fresh_stack(out: Outcome, say: Callable[[str], None]) -> dict[str, Any]:
    """A testbed whose clavisd has learnt nothing yet (an earlier demo's application
    memory would steer the jobs and change the story)."""
    t0 = time.monotonic()
    if status().get("up"):
        say("a testbed is up: taking it down for a fresh one (clavisd must learn from scratch)")
        with timed(out.seconds, "down"):
            testbed("down")
    with timed(out.seconds, "up"):
        testbed("up", "--stack", "--spare-cpus-per-host", str(SPARE_CPUS))
    out.up_s = round(time.monotonic() - t0, 1)
    st = status()
    if not st.get("up") or st.get("stack") is None:
        raise DemoError(f"clavis-testbed up --stack left no stack: {st.get('problems')}")
    return st


def wait_hosts(st: dict[str, Any], out: Outcome, bound_s: float = 30.0) -> None:
    deadline = time.monotonic() + bound_s
    hosts: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        (hosts,) = api(st, "/hosts")
        if hosts and all(h["last_report"] is not None and h["watts"] for h in hosts):
            break
        time.sleep(POLL_S)
    missing = [h["name"] for h in hosts if h["last_report"] is None or not h["watts"]]
    if not hosts or missing:
        raise DemoError(f"no report with watts within {bound_s:.0f}s from {missing or 'any host'}")
    out.hosts = {h["name"]: h for h in hosts}


def build_programs() -> None:
    DEMO_DIR.mkdir(parents=True, exist_ok=True)
    for src, exe, cc in (("stream_triad.c", "stream-triad", "gcc"), ("crunch.c", "crunch", "gcc"),
                         ("mpi_halo.c", "mpi-halo", "mpicc")):  # fmt: skip
        _run([cc, "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(DEMO_DIR / exe),
              str(SOURCES / src)], timeout=120)  # fmt: skip


def _script(job: Job) -> Path:
    exe = DEMO_DIR / job.program
    if job.program == "mpi-halo":
        # -iface eth0: hydra must use the node's own rack address (docs/testbed.md)
        body = f"mpiexec -iface eth0 -n {job.nodes_wanted} {exe} {job.seconds}\n"
    elif job.program == "stream-triad":
        body = f"exec {exe} {job.seconds} {STREAM_MIB}\n"
    else:
        body = f"exec {exe} {job.seconds}\n"
    path = DEMO_DIR / f"{job.tag}.sh"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def job_nodes(job_id: str) -> tuple[str, list[str]]:
    """The job's state and its nodes (expanded)."""
    line = slurm("squeue", "-h", "-j", job_id, "-o", "%T %N").strip()
    state, _, nodelist = line.partition(" ")
    if not nodelist.strip() or nodelist.strip() == "(null)":
        return state, []
    names = slurm("scontrol", "show", "hostnames", nodelist.strip()).split()
    return state, names


def submit(job: Job, extra: list[str] | None = None) -> None:
    """Plain sbatch (no hint), then wait until it runs, so the order is the story's."""
    text = slurm("sbatch", "--parsable", *(extra or []), "-J", job.name,
                 "-N", str(job.nodes_wanted), "-n", str(job.nodes_wanted),
                 "-t", str(JOB_LIMIT_MIN), "-D", str(DEMO_DIR),
                 "-o", str(DEMO_DIR / f"{job.tag}-%j.out"), str(_script(job)))  # fmt: skip
    job.id = text.strip().split(";")[0]
    deadline = time.monotonic() + RUN_S
    state = ""
    while time.monotonic() < deadline:
        state, nodes = job_nodes(job.id)
        if state == "RUNNING" and nodes:
            job.nodes = nodes
            return
        time.sleep(0.3)
    raise DemoError(f"job {job.id} ({job.tag}) not running within {RUN_S:.0f}s: {state}")


def _containers(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    (rows,) = api(st, "/containers")
    return {c["name"]: c for c in rows}


def wait_linked(st: dict[str, Any], jobs: list[Job], out: Outcome) -> None:
    """Every job's nodes carry its job id in clavisd's /containers (spank_clavis ->
    monitor -> report)."""
    t0 = time.monotonic()
    want = {n: j.id for j in jobs for n in j.nodes}
    seen: dict[str, str | None] = {}
    while time.monotonic() < t0 + LINK_S:
        cs = _containers(st)
        seen = {n: cs.get(n, {}).get("job") for n in want}
        if seen == want:
            out.linked_s = round(time.monotonic() - t0, 1)
            return
        time.sleep(POLL_S)
    raise DemoError(f"jobs not linked to their containers within {LINK_S:.0f}s: "
                    f"want {want}, clavisd has {seen}")  # fmt: skip


def wait_classes(st: dict[str, Any], jobs: list[Job], out: Outcome) -> None:
    """The measured (hysteresis) class of every job's containers: devil for the streaming
    ones, turtle for the others."""
    t0 = time.monotonic()
    got: dict[str, Any] = {}
    while time.monotonic() < t0 + CLASS_S:
        cs = _containers(st)
        got = {n: cs.get(n, {}).get("klass") for j in jobs for n in j.nodes}
        # decided by the container's own samples, not only remembered for its application
        own = all(cs.get(n, {}).get("class_source") == "samples" for j in jobs for n in j.nodes)
        if own and all(got[n] == EXPECTED[j.name] for j in jobs for n in j.nodes):
            out.classed_s = round(time.monotonic() - t0, 1)
            out.containers = cs
            for j in jobs:
                j.klass = EXPECTED[j.name]
            return
        time.sleep(POLL_S)
    raise DemoError(f"classes not as expected within {CLASS_S:.0f}s: {got}")


def _advice_knows(doc: dict[str, Any], jobs: list[Job]) -> bool:
    """Whether an advice document carries what step 5 needs: every job's nodes with
    their measured class, and the devils' application (run as root: uid 0) a devil."""
    nodes = {n["node"]: n.get("node_class") for n in doc.get("nodes", [])}
    apps = {a["app"]: a.get("app_class") for a in doc.get("apps", [])}
    return all(nodes.get(n) == j.klass for j in jobs for n in j.nodes) and all(
        apps.get(f"0:{j.name}") == "devil" for j in jobs if j.klass == "devil"
    )


def read_advice(st: dict[str, Any], jobs: list[Job], out: Outcome) -> None:
    """The advice as select/clavis's slurmctld reads it: as the slurm user, once clavisd
    has rewritten it with the classes just decided (bounded: it rewrites it every few
    seconds)."""
    path = st["stack"]["advice"]["path"]
    deadline = time.monotonic() + ADVICE_S
    while True:
        text = _run(["runuser", "-u", "slurm", "--", "cat", path], check=False).stdout
        try:
            out.advice = json.loads(text)
        except ValueError:  # absent (cat failed) or not JSON: the next rewrite
            out.advice = {}
        if _advice_knows(out.advice, jobs):
            break
        if time.monotonic() > deadline:
            raise DemoError(f"the advice did not carry the jobs' classes within "
                            f"{ADVICE_S:.0f}s: {text[-1000:]}")  # fmt: skip
        time.sleep(POLL_S)
    generated = dt.datetime.fromisoformat(out.advice["generated"].replace("Z", "+00:00"))
    out.advice_age_s = round(time.time() - generated.timestamp(), 1)


def repack(st: dict[str, Any], apply: bool) -> dict[str, Any]:
    conf = st["stack"]["clavisd"]["config"]
    argv = ["nsenter", f"--net=/run/netns/{st['stack']['clavisd']['netns']}", "--",
            str(stack.VENV / "bin" / "clavis"), "repack", "--apply" if apply else "--dry-run",
            "--config", conf, "--timeout", "120"]  # fmt: skip
    t0 = time.monotonic()
    cp = _run(argv, timeout=180, check=False)
    m = re.search(r"^decision: (\S+)", cp.stdout, re.M)
    return {"rc": cp.returncode, "stdout": cp.stdout, "stderr": cp.stderr,
            "decision": m.group(1) if m else None,
            "seconds": round(time.monotonic() - t0, 1)}  # fmt: skip


def node_order() -> list[str]:
    """Slurm's node order (slurm.conf), in which cons_tres takes equal idle nodes."""
    return slurm("sinfo", "-N", "-h", "-o", "%N").split()


def idle_nodes() -> list[str]:
    lines = slurm("sinfo", "-N", "-h", "-o", "%N %T").splitlines()
    return [ln.split()[0] for ln in lines if ln.split()[1:] == ["idle"]]


def new_stream_job(st: dict[str, Any], jobs: list[Job], out: Outcome) -> None:
    """End stream-b, so a node on a devil host is free and first in cons_tres's order;
    submit another job of the streaming application, unhinted."""
    _run([str(CLI), "exec", "--", "scontrol", "setdebugflags", "+SelectType"])
    b = next(j for j in jobs if j.tag == "stream-b")
    slurm("scancel", b.id)
    deadline = time.monotonic() + RUN_S
    while time.monotonic() < deadline and not set(b.nodes) <= set(idle_nodes()):
        time.sleep(0.3)
    left = [j for j in jobs if j is not b]
    out.devil_hosts = sorted({_host(n) for j in left if j.klass == "devil" for n in j.nodes})
    idle = set(idle_nodes())
    out.cons_tres_node = next((n for n in node_order() if n in idle), None)
    out.cons_tres_host = _host(out.cons_tres_node) if out.cons_tres_node else None
    log = paths.LOG / "slurmctld.log"
    mark = log.stat().st_size
    job = Job("stream-c", "stream-triad", "stream-triad", 1)
    submit(job)
    out.new_job = job
    out.new_job_host = _host(job.nodes[0])
    with open(log, encoding="utf-8", errors="replace") as f:
        f.seek(mark)
        # select/clavis's own thread reads each new advice file within a fraction of a
        # second and says so once it first has usable advice (the first jobs ran before
        # clavisd wrote any)
        out.ctld_job_lines = [
            ln for ln in f.read().splitlines()
            if "select/clavis: advice" in ln or ("select/clavis" in ln and f"JobId={job.id}" in ln)
        ]  # fmt: skip
    out.ctld_advice_lines = [ln for ln in log.read_text(errors="replace").splitlines()
                             if "select/clavis: advice" in ln][-3:]  # fmt: skip
    jobs.remove(b)
    jobs.append(job)


def pinned_stream_job(st: dict[str, Any], jobs: list[Job], out: Outcome) -> Job | None:
    """Unless two streaming jobs share a host already, a user pins another one to an
    idle node of a host running one (`sbatch -w`: an explicit node list is the user's to
    choose), so two devils share a host, as before Clavis had learnt anything; wait until
    clavisd classes it. None when no pin was needed."""
    devils: dict[str, int] = {}
    for j in jobs:  # by application: stream-c has run too briefly to be classed
        if EXPECTED[j.name] == "devil":
            for n in j.nodes:
                devils[_host(n)] = devils.get(_host(n), 0) + 1
    if any(v > 1 for v in devils.values()):
        return None
    free = [n for n in node_order() if n in set(idle_nodes()) and _host(n) in devils]
    if not free:
        raise DemoError(f"no idle node on a devil's host {sorted(devils)}")
    job = Job("stream-d", "stream-triad", "stream-triad", 1)
    submit(job, ["-w", free[0]])
    jobs.append(job)
    scratch = Outcome()  # the first jobs' link and class times stay the story's
    wait_linked(st, [job], scratch)
    wait_classes(st, [job], scratch)
    return job


def cancel(jobs: list[Job]) -> None:
    ids = [j.id for j in jobs if j.id]
    if ids:
        slurm("scancel", *ids)


# ---------------------------------------------------------------- narration


def _say(text: str) -> None:
    print(text, flush=True)


def scenario(say: Say = _say) -> Outcome:
    out = Outcome()
    t_all = time.monotonic()
    say("== 1. The cluster: a fresh testbed with the Clavis stack (clavis-testbed up --stack)")
    st = fresh_stack(out, say)
    with timed(out.seconds, "hosts"):
        wait_hosts(st, out)
    say(f"up in {out.up_s:.1f}s; every host's monitor reports to clavisd, watts from its BMC:")
    for h in out.hosts.values():
        say(f"   {h['name']:<6} rack {h['rack']:<3} {h['cores']} cores  {h['watts']:.0f} W")
    say("\n== 2. Plain sbatch jobs, no hints: two streaming, two compute-bound, one 2-node MPI")
    with timed(out.seconds, "build"):
        build_programs()
    jobs = [Job(tag, name, prog, n) for tag, name, prog, n in JOBS]
    out.jobs = jobs  # the same list: step 6 swaps stream-b for stream-c
    try:
        for j in jobs:
            with timed(out.seconds, "jobs"):
                submit(j)
            say(f"   job {j.id:<4} {j.tag:<9} (sbatch -J {j.name}) on {','.join(j.nodes)}")
        say("   (select/clavis knew nothing yet: placed as cons_tres would)")
        say("\n== 3. Jobs linked to their containers, then classed by clavisd (7 of 10 intervals)")
        with timed(out.seconds, "linked"):
            wait_linked(st, jobs, out)
        say(f"   every job's nodes carry its id in clavisd's /containers after {out.linked_s}s")
        with timed(out.seconds, "classes"):
            wait_classes(st, jobs, out)
        say(f"   classes decided after {out.classed_s}s more:")
        for j in jobs:
            for n in j.nodes:
                c = out.containers[n]
                mpki = c["intensity_mpki"]
                say(f"   {n:<7} job {j.id:<4} app {c['app'] or '-':<16} "
                    f"{'-' if mpki is None else f'{mpki:5.1f}'} misses/1000 instr  "
                    f"votes {c['votes'][-10:]:<10} -> {c['klass']}")  # fmt: skip
        say("\n== 4. The advice clavisd writes for select/clavis (read as the slurm user)")
        with timed(out.seconds, "advice"):
            read_advice(st, jobs, out)
        say(f"   {st['stack']['advice']['path']}: written {out.advice_age_s}s ago, "
            f"valid {out.advice['valid_s']:.0f}s")  # fmt: skip
        for n in out.advice["nodes"]:
            say(f"   {n['node']:<7} host {n['host']:<5} {n['contention']:<12} {n['node_class']}")
        for a in out.advice.get("apps", []):
            say(f"   application {a['app']}: {a['app_class']} ({a['jobs_seen']} decisions)")
        say(
            "   (select/clavis's thread in slurmctld reads each new one within 0.2 s; "
            "its job tests use what it parsed: step 5)"
        )
        say("\n== 5. A new streaming job of the same application, unhinted")
        with timed(out.seconds, "unhinted"):
            new_stream_job(st, jobs, out)
        nj = out.new_job
        assert nj is not None
        say(f"   stream-b ended; devil hosts now: {', '.join(out.devil_hosts)}; cons_tres "
            f"would take {out.cons_tres_node} (first idle node)")  # fmt: skip
        say(f"   job {nj.id} (sbatch -J {nj.name}) went to {','.join(nj.nodes)}, host "
            f"{out.new_job_host}")  # fmt: skip
        for ln in out.ctld_job_lines:
            say(f"   slurmctld.log: {ln}")
        with timed(out.seconds, "pinned"):
            d = pinned_stream_job(st, jobs, out)
        if d is not None:
            say(f"   a user pins one more (sbatch -w {d.nodes[0]} -J stream-triad) on "
                f"{_host(d.nodes[0])}, beside a devil: job {d.id}, classed {d.klass}")  # fmt: skip
        say("\n== 6. clavis repack: the plan clavisd makes from the live reports, applied")
        out.moves = demo_moves.run(st, jobs, say, out.seconds)
    finally:
        with timed(out.seconds, "cancel"):
            cancel(jobs)
    out.seconds["total"] = round(time.monotonic() - t_all, 1)
    say("\nphases (s): " + " ".join(f"{k}={v:.1f}" for k, v in out.seconds.items()))
    say(f"demo done in {out.seconds['total']:.0f}s; its jobs are cancelled, the cluster "
        "stays up: deploy/testbed/clavis-testbed down  # to remove it")  # fmt: skip
    return out


def missing() -> str | None:
    """Why the testbed cannot run here (None: it can): it needs root and network
    namespaces."""
    if os.geteuid() != 0:
        return "not root"
    try:
        cp = subprocess.run(["unshare", "--net", "--", "true"], capture_output=True,
                            timeout=30, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no network namespaces ({exc})"
    if cp.returncode != 0:
        return f"no network namespaces (unshare --net: {cp.stderr.decode().strip()[:200]})"
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m ctb.demo", description=__doc__.split("\n")[0])
    p.add_argument("--json", help="write what the scenario saw to this file")
    p.add_argument("--can-run", action="store_true",
                   help="exit 0 with root and network namespaces, else 1 saying why")  # fmt: skip
    args = p.parse_args(argv)
    if args.can_run:
        why = missing()
        if why:
            print(why)
        return 1 if why else 0
    try:
        out = scenario()
    except (DemoError, subprocess.TimeoutExpired, OSError) as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(out), indent=1))
    return 0


if __name__ == "__main__":
    # run the package's copy: demo_moves imports this module as ctb.demo, and one copy
    # must define DemoError and the rest
    from ctb.demo import main as package_main

    sys.exit(package_main())
