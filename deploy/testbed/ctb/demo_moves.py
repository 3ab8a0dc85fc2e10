"""Step 5 of `make demo`: clavisd's repacking plan, made from the monitors' live reports,
applied by the clavis-migrator agents (thesis §5.4-§5.5.3), with Slurm none the wiser.

Shown in order: the plan (`clavis repack --dry-run`); what an admin sees with the agents
stopped (`clavis-testbed agents stop`: `--apply` exits 1, "no migrator agent answered",
and nothing moves); `--apply` with the agents back, each step as it ends (CRIU dump,
transfer, restore on the target, frozen time); Slurm's view afterwards (every job still
RUNNING on the same node names, one allocation each in sacct, no node down or drained);
where the testbed now runs each node (placement.py); and P, D, C as clavisd computes
them on its next reports against the plan's "after".
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from . import demo, placement, stack

PLAN_S = 240.0  # the plan's steps: a CRIU move takes 2-3 s here; bounded all the same
SETTLE_S = 90.0  # clavisd sees every moved node on its new host, classes decided again
TERMINAL = ("done", "failed", "superseded")

# P, D, C, M of the current placement as clavisd's repacking pass computes them
# (repack.decide's now_score): its own snapshot of the store, scored by the evaluator.
_NOW = """import json, sys, time
from dataclasses import asdict
from pathlib import Path
from clavis.documents import load_cluster
from clavis.instance import build_instance
from clavis.objectives import Weights, score
from clavis.service import snapshot
from clavis.service.classify import Thresholds
from clavis.service.config import load_config
from clavis.service.store import Store
cfg = load_config(Path(sys.argv[1]))
cluster = load_cluster(cfg.cluster_file)
store = Store(cfg.store.url, time.time())
snap = snapshot.take(cluster, hosts=store.hosts(), containers=store.containers(),
                     power_models=store.power_models(), now=time.time(),
                     fresh_s=cfg.ingest.max_report_age_s,
                     thresholds=Thresholds(cfg.classify.devil_threshold_mpki,
                                           cfg.classify.host_thresholds))
inst = build_instance(snap.cluster, snap.workload, snap.current, "current placement")
s = score(inst, tuple(h for h in inst.current if h is not None),
          Weights(*cfg.repack.default_weights))
print(json.dumps(asdict(s.raw)))
"""


@dataclass
class Moves:
    """What step 5 saw (demo.Outcome.moves; the test reads it)."""

    dry: dict[str, Any] = field(default_factory=dict)
    stopped: dict[str, Any] = field(default_factory=dict)
    apply: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)
    plan_s: float | None = None
    jobs_before: dict[str, list[str]] = field(default_factory=dict)
    jobs_after: dict[str, list[str]] = field(default_factory=dict)
    states_after: dict[str, str] = field(default_factory=dict)
    sacct: dict[str, list[str]] = field(default_factory=dict)
    node_states: dict[str, str] = field(default_factory=dict)
    expected: dict[str, str] = field(default_factory=dict)
    placement: dict[str, str] = field(default_factory=dict)
    clavisd_hosts: dict[str, str] = field(default_factory=dict)
    # what clavisd knows of each moved node once settled: host, job, app, class, source
    moved_rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    settled_s: float | None = None
    plan_after: dict[str, float] = field(default_factory=dict)
    now: dict[str, float] = field(default_factory=dict)


def final_hosts(steps: list[dict[str, Any]]) -> dict[str, str]:
    """Where the plan's steps leave each container they move (a staged container moves
    twice: its last step counts)."""
    out: dict[str, str] = {}
    for s in sorted(steps, key=lambda s: int(s["idx"])):
        out[s["container"]] = s["target"]
    return out


def now_objectives(st: dict[str, Any]) -> dict[str, float]:
    py = str(stack.VENV / "bin" / "python")
    out = demo._run([py, "-c", _NOW, st["stack"]["clavisd"]["config"]], timeout=120).stdout
    doc: dict[str, float] = json.loads(out)
    return doc


def _verbatim(say: demo.Say, result: dict[str, Any]) -> None:
    for ln in (result["stdout"] + result["stderr"]).splitlines():
        say(f"   {ln}")
    say(f"   exit status {result['rc']}")


def _wait_plan(st: dict[str, Any], plan_id: int, say: demo.Say, m: Moves) -> None:
    t0 = time.monotonic()
    told: set[int] = set()
    plan: dict[str, Any] = {}
    while time.monotonic() < t0 + PLAN_S:
        (plan,) = demo.api(st, f"/plans/{plan_id}")
        for s in plan["steps"]:
            if s["idx"] not in told and s["state"] in ("done", "failed", "rolled_back"):
                told.add(s["idx"])
                say(f"   step {s['idx']} (wave {s['wave']}) {s['container']} {s['source']} -> "
                    f"{s['target']}: {s['state']}: {s['message']}")  # fmt: skip
        if plan["state"] in TERMINAL:
            break
        time.sleep(demo.POLL_S)
    m.plan = plan
    m.plan_s = round(time.monotonic() - t0, 1)
    if plan.get("state") != "done":
        raise demo.DemoError(f"plan {plan_id} not done within {PLAN_S:.0f}s: "
                             f"{plan.get('state')}: {plan.get('message')}")  # fmt: skip


def _slurm_view(jobs: list[demo.Job], m: Moves) -> None:
    """squeue, sacct and sinfo once each, for every job (a call costs a command's start
    on a busy machine)."""
    ids = ",".join(j.id for j in jobs)
    for ln in demo.slurm("squeue", "-h", "-j", ids, "-o", "%i %T %N").splitlines():
        job, state, nodelist = [*ln.split(), "", ""][:3]
        m.states_after[job] = state
        m.jobs_after[job] = (
            demo.slurm("scontrol", "show", "hostnames", nodelist).split()
            if "[" in nodelist
            else nodelist.split(",")
        )
    out = demo.slurm("sacct", "-X", "-n", "-P", "-j", ids, "-o", "JobIDRaw,State,NodeList")
    for j in jobs:
        m.states_after.setdefault(j.id, "")
        m.jobs_after.setdefault(j.id, [])
        m.sacct[j.id] = [ln for ln in out.splitlines() if ln.split("|")[0] == j.id]
    lines = demo.slurm("sinfo", "-N", "-h", "-o", "%N %T").splitlines()
    m.node_states = {ln.split()[0]: ln.split()[1] for ln in lines if len(ln.split()) == 2}


def _settle(st: dict[str, Any], jobs: list[demo.Job], m: Moves) -> None:
    """Bounded wait until clavisd's /containers has every node on the host the testbed
    runs it on and the jobs' classes decided again (a moved node's first reports come
    from its new host's monitor, which starts its votes afresh)."""
    t0 = time.monotonic()
    while time.monotonic() < t0 + SETTLE_S:
        cs = demo._containers(st)
        m.clavisd_hosts = {n: c["host"] for n, c in cs.items()}
        classed = all(cs.get(n, {}).get("klass") == demo.EXPECTED[j.name]
                      for j in jobs for n in j.nodes)  # fmt: skip
        if classed and all(m.clavisd_hosts.get(n) == h for n, h in m.placement.items()):
            m.settled_s = round(time.monotonic() - t0, 1)
            keys = ("host", "job", "app", "klass", "class_source")
            m.moved_rows = {n: {k: cs[n].get(k) for k in keys} for n in m.expected}
            return
        time.sleep(demo.POLL_S)
    raise demo.DemoError(f"clavisd did not see the moved nodes on their hosts with their "
                         f"classes within {SETTLE_S:.0f}s: {m.clavisd_hosts}")  # fmt: skip


def run(st: dict[str, Any], jobs: list[demo.Job], say: demo.Say,
        seconds: dict[str, float]) -> Moves:  # fmt: skip
    """Steps 6 and 7; each phase's wall time added to seconds."""
    m = Moves()
    with demo.timed(seconds, "dry_run"):
        m.dry = demo.repack(st, apply=False)
    _verbatim(say, m.dry)
    say("   ... with the migrator agents stopped (clavis-testbed agents stop), --apply:")
    with demo.timed(seconds, "agents_stopped"):
        demo.testbed("agents", "stop")
        try:
            m.stopped = demo.repack(st, apply=True)
        finally:
            demo.testbed("agents", "start")
    for ln in m.stopped["stderr"].splitlines():
        say(f"   {ln}")
    say(f"   exit status {m.stopped['rc']}; nothing moved. Agents started again.")
    m.jobs_before = {j.id: list(j.nodes) for j in jobs}
    say("   clavis repack --apply: the agents move the nodes (CRIU, the job's processes in them)")
    with demo.timed(seconds, "apply"):
        m.apply = demo.repack(st, apply=True)
    _verbatim(say, m.apply)
    found = re.search(r"^plan (\d+)\s+state", m.apply["stdout"], re.M)
    if m.apply["rc"] != 0 or not found:
        raise demo.DemoError(f"clavis repack --apply did not start a plan: {m.apply}")
    with demo.timed(seconds, "plan"):
        _wait_plan(st, int(found.group(1)), say, m)
    say(f"   plan {found.group(1)}: {m.plan['state']} after {m.plan_s}s: {m.plan['message']}")
    m.expected = final_hosts(m.plan["steps"])
    m.placement = placement.read()
    moved = {n: h for n, h in m.placement.items() if h != placement.home(n)}
    now_on = ", ".join(f"{n} on {h}" for n, h in sorted(moved.items())) or "all at home"
    say(f"   where the testbed runs the nodes now (placement.json): {now_on}")
    say("\n== 7. Slurm saw nothing")
    with demo.timed(seconds, "slurm_view"):
        _slurm_view(jobs, m)
    for j in jobs:
        same = "same nodes" if m.jobs_after[j.id] == m.jobs_before[j.id] else "NODES CHANGED"
        sacct = " | ".join(m.sacct[j.id])
        say(f"   job {j.id:<4} {j.tag:<9} {m.states_after[j.id]} on "
            f"{','.join(m.jobs_after[j.id])} ({same}); sacct: {sacct}")  # fmt: skip
    moved_nodes = sorted(m.expected)
    say("   moved nodes in sinfo: "
        + ", ".join(f"{n} {m.node_states.get(n, '?')}" for n in moved_nodes))  # fmt: skip
    with demo.timed(seconds, "settle"):
        _settle(st, jobs, m)
    m.plan_after = {k: float(v) for k, v in m.plan["summary"]["objectives"]["after"].items()}
    with demo.timed(seconds, "objectives"):
        m.now = now_objectives(st)
    say(f"   clavisd sees every node on its new host {m.settled_s}s later; P, D, C as it "
        "computes them now against the plan's \"after\":")  # fmt: skip
    for n, row in sorted(m.moved_rows.items()):
        say(f"   {n:<7} on {row['host']:<5} job {row['job']} app {row['app']} -> {row['klass']} "
            f"({row['class_source']})")  # fmt: skip
    for k in "PDC":
        say(f"   {k}: plan {m.plan_after[k]:.6g}, now {m.now[k]:.6g}")
    return m
