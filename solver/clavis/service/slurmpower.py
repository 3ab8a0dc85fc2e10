"""Slurm's power saving for the container nodes (issue 17; docs/clavisd.md, Slurm power
saving).

Slurm's SuspendProgram and ResumeProgram (slurm-plugin/power/) ask clavisd, signed like
every client: a suspended node's container is stopped; a resumed node's container is
started on a host clavisd chooses with the one evaluator (clavis.objectives): the host
with room whose F is lowest with the node on it, the nodes resumed together and the
job's nodes that already run (``job_nodes``: SLURM_RESUME_FILE's nodes_alloc less
nodes_resume) counted as one job whose members talk (``pair_bytes_per_s``, so C keeps
the new nodes on the host or rack of the others; the new nodes devils when a running one
is a measured devil, so D keeps them off devil hosts),
a host that is off counted at its off watts until the node is on it (so P prefers a
powered host, and powers one on only when none has room or the trade-off says so).
A chosen host that is off is powered on through host power (hostpower.py) first: no
node is started on a host that is off. clavisd runs the site's ``node_command`` for the
container itself (the testbed: ``clavis-testbed node-power``).
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from clavis.instance import build_instance
from clavis.model import Container, Job, Placement, Workload
from clavis.objectives import Weights, score
from clavis.service.hostpower import HostPower
from clavis.service.slurmpower_config import SlurmPowerConfig
from clavis.service.snapshot import Snapshot

log = logging.getLogger("clavisd.slurmpower")


class ResumeError(Exception):
    """No host can take a node (no room on any host that is on or may be powered on)."""


@dataclass(frozen=True)
class NodeAsk:
    name: str
    cores: int
    memory_bytes: int


@dataclass(frozen=True)
class NodeResult:
    node: str
    host: str | None
    ok: bool
    message: str


# --- the choice (pure) ---------------------------------------------------------------


def choose_hosts(
    snap: Snapshot,
    asks: Sequence[NodeAsk],
    weights: Weights,
    *,
    powerable: frozenset[str],
    pending: Mapping[str, tuple[str, int]],
    pair_bytes_per_s: float,
    job_nodes: Sequence[str] = (),
) -> dict[str, str]:
    """Node -> host for every ask. Candidates: hosts ``up`` in the snapshot (on and
    reporting) and ``powerable`` ones (off, with a BMC), each with room for the node's
    cores after what runs there, what ``pending`` holds (node -> (host, cores): started,
    not reported yet) and the asks placed before it. A node the monitors already list
    stays where it is. ``job_nodes``: the job's nodes that are up already; those the
    monitors list are members of the asked job where they run (fixed: only C sees them),
    others are ignored. The lowest F wins (ties: a host already on, then by name): first
    among hosts with room for all the nodes, else greedily node by node, each candidate
    scored with the nodes not yet placed on it. Raises ResumeError when a node fits
    nowhere."""
    cluster = snap.cluster
    running = dict(snap.current.assignment)
    load = {h.name: 0 for h in cluster.hosts}
    for node, host in running.items():
        load[host] += _cores_of(snap, node)
    for node, (host, cores) in pending.items():
        if node not in running and host in load:
            load[host] += cores
    up = {h.name for h in cluster.hosts if h.state == "up"}
    cands = [h for h in cluster.hosts if h.name in up or h.name in powerable]
    placed: dict[str, str] = {}
    todo = [a for a in asks if a.name not in running]
    for a in asks:
        if a.name in running:
            placed[a.name] = running[a.name]
    if not todo:
        return placed
    asked_names = {a.name for a in asks}
    members = [n for n in dict.fromkeys(job_nodes) if n in running and n not in asked_names]
    jobs, fixed = _take_out(list(snap.workload.jobs) if snap.workload is not None else [],
                            frozenset(members))  # fmt: skip
    threshold = snap.workload.devil_threshold_mpki if snap.workload is not None else 1.0
    # The new nodes run the job's program: when its running nodes are measured devils,
    # they are placed as devils (D keeps them off devil hosts); else as turtles.
    devil = any(_is_devil(m, threshold) for m in fixed if m.name not in snap.unknown)
    asked = Job(
        name="resume:" + todo[0].name,  # a name no reported job has (":")
        containers=[*(Container(name=a.name, cores=a.cores, memory_bytes=a.memory_bytes,
                                intensity_mpki=0.0, klass="devil" if devil else "turtle")
                      for a in todo), *fixed],
        all_to_all_bytes_per_s=pair_bytes_per_s,
    )  # fmt: skip
    workload = Workload(devil_threshold_mpki=threshold, jobs=[*jobs, asked])
    # every host up for the evaluation: P counts a host by its load, not its state, and
    # the candidates were chosen above
    everyone = cluster.model_copy(
        update={"hosts": [h.model_copy(update={"state": "up"}) for h in cluster.hosts]}
    )
    inst = build_instance(everyone, workload, Placement(assignment=running))
    index = {h.name: i for i, h in enumerate(inst.hosts)}
    base = [h if h is not None else -1 for h in inst.current]
    pos = inst.container_by_name

    def f_with(rest: Sequence[NodeAsk], host: str) -> tuple[float, int, str]:
        """F with the nodes placed so far, and ``rest`` on ``host``; ties to a host on."""
        assignment = list(base)
        for node, where in placed.items():
            assignment[pos[node]] = index[where]
        for r in rest:
            assignment[pos[r.name]] = index[host]
        f = score(inst, tuple(assignment), weights).F
        return (round(f, 12), 0 if host in up else 1, host)

    # One host for all of them when one has room: they are turtles (nothing to spread
    # for D), one host adds at most one host's watts to P and makes their C zero.
    total = sum(a.cores for a in todo)
    whole = [f_with(todo, h.name) for h in cands if load[h.name] + total <= h.cores]
    if whole:
        host = min(whole)[2]
        return {**placed, **{a.name: host for a in todo}}
    for k, a in enumerate(todo):
        # the rest of the job is scored on the same host (it follows this node, as far
        # as the estimate goes), so the first nodes go where the others can join them
        fits = [f_with(todo[k:], h.name) for h in cands if load[h.name] + a.cores <= h.cores]
        if not fits:
            raise ResumeError(f"node {a.name} ({a.cores} cores): no host that is on or may "
                              "be powered on has room")  # fmt: skip
        host = min(fits)[2]
        placed[a.name] = host
        load[host] += a.cores
    return placed


def _is_devil(c: Container, threshold: float) -> bool:
    """Workload.classify's rule: the class given, else the intensity against the threshold."""
    return c.klass == "devil" if c.klass is not None else c.intensity_mpki >= threshold


def _take_out(jobs: list[Job], names: frozenset[str]) -> tuple[list[Job], list[Container]]:
    """``jobs`` without the containers ``names`` (and their flows; a job left empty goes),
    and those containers: the resumed job's running nodes join the asked job instead."""
    if not names:
        return jobs, []
    kept, taken = [], []
    for j in jobs:
        out = [c for c in j.containers if c.name in names]
        if not out:
            kept.append(j)
            continue
        taken += out
        rest = [c for c in j.containers if c.name not in names]
        if rest:
            flows = [f for f in j.traffic if f.src not in names and f.dst not in names]
            kept.append(j.model_copy(update={"containers": rest, "traffic": flows}))
    return kept, taken


def _cores_of(snap: Snapshot, node: str) -> int:
    if snap.workload is None:
        return 0
    for j in snap.workload.jobs:
        for c in j.containers:
            if c.name == node:
                return c.cores
    return 0


# --- the service side ----------------------------------------------------------------


class SlurmPower:
    """Runs suspends and resumes for clavisd's API; one resume at a time (the choice
    must see the nodes the previous one started)."""

    def __init__(
        self,
        cfg: SlurmPowerConfig,
        *,
        snapshot: Callable[[float], Snapshot],
        weights: Callable[[], Weights],
        host_power: HostPower | None,
    ) -> None:
        self.cfg = cfg
        self.snapshot = snapshot
        self.weights = weights
        self.host_power = host_power
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[str, int, float]] = {}  # node -> host, cores, until
        self._host_locks: dict[str, threading.Lock] = {}  # one power on of a host at a time

    def _command(self, *args: str) -> tuple[bool, str]:
        argv = [*self.cfg.node_command, *args]
        try:
            cp = subprocess.run(argv, capture_output=True, text=True, check=False,
                                timeout=self.cfg.command_timeout_s)  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"{argv[0]}: {exc}"
        text = (cp.stderr or cp.stdout).strip()[-300:]
        return cp.returncode == 0, text or f"exit {cp.returncode}"

    def suspend(self, nodes: Sequence[str]) -> list[NodeResult]:
        """Stop each node's container (side by side: Slurm's SuspendTimeout covers all)."""

        def one(node: str) -> NodeResult:
            ok, msg = self._command("stop", node)
            log.info("slurm power node=%s action=suspend ok=%s %s", node, ok, msg)
            return NodeResult(node, None, ok, msg)

        with ThreadPoolExecutor(max_workers=max(1, min(8, len(nodes)))) as pool:
            return list(pool.map(one, nodes))

    def _switching(self) -> bool:
        hp = self.host_power
        return hp is not None and any(
            hp.state(h).power in ("powering-off", "powering-on") for h in hp.bmcs
        )

    def _host_lock(self, host: str) -> threading.Lock:
        with self._lock:
            return self._host_locks.setdefault(host, threading.Lock())

    def resume(self, asks: Sequence[NodeAsk], job_nodes: Sequence[str] = ()) -> list[NodeResult]:
        """Choose a host for each node (near ``job_nodes``, the job's nodes that are up),
        power on the chosen hosts that are off, start the
        containers; every node gets a result (a failure names why). Choices are made one
        at a time (the next sees this one's nodes as pending); a host is powered on by
        one resume at a time (another that chose it waits, then finds it on); the rest
        runs side by side, so one job's resume does not wait for another's boot."""
        deadline = time.monotonic() + self.cfg.switch_wait_s
        while True:
            with self._lock:
                chosen = self._choose(asks, job_nodes)
            # no room now, but a host is being switched: once off it may be powered on
            if not isinstance(chosen, list) or not self._switching():
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(1.0)
        if isinstance(chosen, list):
            return chosen
        where, powerable = chosen
        hp = self.host_power
        failed: dict[str, str] = {}
        for host in sorted(set(where.values()) & powerable):
            assert hp is not None
            with self._host_lock(host):
                out = hp.power_on(host)
            if out.state != "on":
                failed[host] = f"host {host} did not come on: {out.message}"

        def start(a: NodeAsk) -> NodeResult:
            host = where[a.name]
            if host in failed:
                return NodeResult(a.name, host, False, failed[host])
            ok, msg = self._command("start", a.name, host)
            log.info("slurm power node=%s host=%s action=resume ok=%s %s", a.name, host, ok, msg)
            return NodeResult(a.name, host, ok, msg)

        # side by side: a node's start is its boot, and a job waits for all of its nodes
        with ThreadPoolExecutor(max_workers=max(1, min(8, len(asks)))) as pool:
            results = list(pool.map(start, asks))
        with self._lock:
            for r in results:
                if not r.ok:
                    self._pending.pop(r.node, None)
        return results

    def _choose(
        self, asks: Sequence[NodeAsk], job_nodes: Sequence[str]
    ) -> tuple[dict[str, str], frozenset[str]] | list[NodeResult]:
        """(node -> host, the chosen hosts' candidates that are off), the nodes recorded as
        pending and their hosts held on; or every node's failure. Under ``_lock``."""
        now = time.time()
        self._pending = {n: p for n, p in self._pending.items() if p[2] > now}
        hp = self.host_power
        powerable = frozenset(h for h in (hp.bmcs if hp is not None else ())
                              if hp is not None and hp.state(h).power == "off")  # fmt: skip
        snap = self.snapshot(now)
        try:
            where = choose_hosts(
                snap, asks, self.weights(), powerable=powerable,
                pending={n: (h, c) for n, (h, c, _) in self._pending.items()},
                pair_bytes_per_s=self.cfg.pair_bytes_per_s, job_nodes=job_nodes,
            )  # fmt: skip
        except ResumeError as exc:
            return [NodeResult(a.name, None, False, str(exc)) for a in asks]
        until = now + self.cfg.pending_s
        for a in asks:
            self._pending[a.name] = (where[a.name], a.cores, until)
        if hp is not None:
            # an empty host chosen now must not be powered off before its monitor lists
            # the nodes started on it
            for host in sorted(set(where.values())):
                if host in hp.bmcs:
                    hp.hold(host, until)
        near = f" near {len(job_nodes)} running node(s) of the job" if job_nodes else ""
        log.info("slurm power resume %s%s", ", ".join(f"node={n} host={h}"
                 for n, h in sorted(where.items())), near)  # fmt: skip
        return where, powerable
