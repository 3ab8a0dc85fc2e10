"""The cluster as the store sees it now, as the solver's documents (cluster, workload,
current placement), so repacking and the advice file score it with the one evaluator.

- Hosts and racks come from the cluster file; a fitted power model replaces the file's.
- A host without a recent report is treated as draining: it keeps its containers, and
  takes no new ones, as its state is unknown.
- A container's class is the user's hint when given, else its hysteresis class when it
  has one (docs/clavisd.md), else its last intensity against its host's threshold
  (``classify.host_thresholds``, else the default), as ingest votes
  (``classify.effective``). A container with none of these is ``unknown``: the solver
  places it as a turtle (no measurement says it contends, so nothing is moved for it),
  and ``Snapshot.unknown`` names it so the advice never calls it a turtle.
- Jobs are grouped from the containers' job names; a container without a job is a job
  of its own. Traffic to a container of another job is not counted: C is defined for a
  job's own flows (docs/objectives.md).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from clavis.model import Cluster, Container, Flow, Host, Job, Placement, PowerModel, Workload
from clavis.service.classify import Thresholds, effective
from clavis.service.rows import ContainerRow, HostRow, PowerModelRow


@dataclass(frozen=True)
class Snapshot:
    cluster: Cluster
    workload: Workload | None  # None: no container reported yet
    current: Placement
    unknown: frozenset[str] = frozenset()  # containers of unknown class (placed as turtles)


def _power(host: Host, model: PowerModelRow | None) -> PowerModel:
    if model is None:
        return host.power
    idle = max(model.idle_w, 0.0)
    peak = max(idle + model.slope_w * host.cores, idle)
    return PowerModel(idle_w=idle, peak_w=peak, off_w=min(host.power.off_w, idle))


def take(
    cluster: Cluster,
    *,
    hosts: list[HostRow],
    containers: list[ContainerRow],
    power_models: Mapping[str, PowerModelRow],
    now: float,
    fresh_s: float,
    thresholds: Thresholds,
    not_on: frozenset[str] = frozenset(),
) -> Snapshot:
    """``not_on``: hosts host power (hostpower.py) does not know to be on (off, unknown,
    switching); they drain like quiet hosts, so no move targets a host that is off."""
    last = {h.name: h.last_report for h in hosts}
    new_hosts = []
    for h in cluster.hosts:
        seen = last.get(h.name)
        state = h.state
        if state == "up" and (seen is None or now - seen > fresh_s or h.name in not_on):
            state = "drain"
        new_hosts.append(h.model_copy(update={"power": _power(h, power_models.get(h.name)),
                                              "state": state}))  # fmt: skip
    snap_cluster = cluster.model_copy(update={"hosts": new_hosts})
    known = {h.name for h in cluster.hosts}
    present = [c for c in containers if c.host in known]
    groups: dict[str, list[ContainerRow]] = defaultdict(list)
    for c in present:
        groups[c.job or f"node-{c.name}"].append(c)
    shown = {
        c.name: effective(c.klass, c.class_source, c.class_hint, c.intensity_mpki,
                          thresholds.of(c.host))[0]
        for c in present
    }  # fmt: skip
    jobs = []
    for name, members in sorted(groups.items()):
        names = {c.name for c in members}
        flows = [
            Flow(src=c.name, dst=peer, bytes_per_s=bps)
            for c in members
            for peer, bps in sorted(c.traffic.items())
            if peer in names and bps > 0
        ]
        jobs.append(Job(name=name, traffic=flows, containers=[
            Container(name=c.name, cores=c.cores, memory_bytes=c.memory_bytes,
                      intensity_mpki=c.intensity_mpki or 0.0,
                      klass="devil" if shown[c.name] == "devil" else "turtle")
            for c in members
        ]))  # fmt: skip
    workload = Workload(devil_threshold_mpki=thresholds.default, jobs=jobs) if jobs else None
    return Snapshot(
        snap_cluster,
        workload,
        Placement(assignment={c.name: c.host for c in present}),
        frozenset(n for n, k in shown.items() if k == "unknown"),
    )


def cluster_mismatch(
    theirs: Cluster, ours: Cluster, what: str = "the front", here: str = "clavisd runs"
) -> str | None:
    """How a cluster a document was made for (``what``: a front, a replay record) differs
    from clavisd's (its name, hosts, their racks and cores), or None. Weights calibrated on
    another cluster's trade-offs would steer this one by numbers that do not describe it,
    and a plan made for another cluster explains nothing here. Power and host states may
    differ: such documents come from snapshots, with fitted power models and draining
    hosts."""
    if theirs.name != ours.name:
        return f"cluster {theirs.name!r}, but {here} {ours.name!r}"
    mine = {h.name: h for h in ours.hosts}
    given = {h.name: h for h in theirs.hosts}
    missing, extra = sorted(mine.keys() - given.keys()), sorted(given.keys() - mine.keys())
    if missing or extra:
        return f"hosts not in {what}: {missing[:5]}; hosts not in this cluster: {extra[:5]}"
    for name, h in sorted(given.items()):
        own = mine[name]
        if (h.cores, h.rack) != (own.cores, own.rack):
            return (f"host {name!r} has {h.cores} cores in rack {h.rack!r} in {what}, "
                    f"{own.cores} in rack {own.rack!r} here")  # fmt: skip
    return None
