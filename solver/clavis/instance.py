"""The compiled problem instance: cluster + workload (+ current placement) as indexed arrays.

Solvers and the evaluator work on host and container *indices*; names live only at the
edges. Building an instance checks what no single document can check alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from clavis.documents import InputError
from clavis.model import Cluster, Placement, Workload

# A placement as solvers see it: host index per container index.
Assignment = tuple[int, ...]


@dataclass(frozen=True)
class HostSpec:
    name: str
    cores: int
    domains: int
    devil_tolerance: int  # devil cores the host holds before devils contend
    rack: int
    idle_w: float
    slope_w: float  # watts per busy core
    empty_w: float  # watts when no container runs on it
    state: str = "up"  # up | drain | down (model.HostState)


@dataclass(frozen=True)
class ContainerSpec:
    name: str
    job: int
    cores: int
    memory_bytes: int
    intensity_mpki: float
    devil: bool


@dataclass(frozen=True)
class Flow:
    """Undirected traffic between two containers (a < b): bytes/s summed over both ways."""

    a: int
    b: int
    bytes_per_s: float


@dataclass(frozen=True)
class UniformTraffic:
    """Every two of ``members`` exchange ``bytes_per_s`` (both ways added): a job's
    all-to-all traffic, kept as one entry instead of n*(n-1)/2 flows."""

    members: tuple[int, ...]
    bytes_per_s: float

    @property
    def pairs(self) -> int:
        return len(self.members) * (len(self.members) - 1) // 2


@dataclass(frozen=True)
class Instance:
    hosts: tuple[HostSpec, ...]
    racks: tuple[str, ...]
    jobs: tuple[str, ...]
    containers: tuple[ContainerSpec, ...]
    flows: tuple[Flow, ...]
    same_rack_cost: float
    cross_rack_cost: float
    current: tuple[int | None, ...]
    uniform: tuple[UniformTraffic, ...] = ()

    @cached_property
    def container_by_name(self) -> dict[str, int]:
        return {c.name: i for i, c in enumerate(self.containers)}

    @cached_property
    def host_by_name(self) -> dict[str, int]:
        return {h.name: i for i, h in enumerate(self.hosts)}

    @cached_property
    def job_containers(self) -> tuple[tuple[int, ...], ...]:
        out: list[list[int]] = [[] for _ in self.jobs]
        for i, c in enumerate(self.containers):
            out[c.job].append(i)
        return tuple(tuple(x) for x in out)

    @cached_property
    def job_traffic(self) -> tuple[float, ...]:
        """Per job, the bytes/s its containers exchange: explicit flows and all-to-all."""
        out = [0.0] * len(self.jobs)
        for f in self.flows:
            out[self.containers[f.a].job] += f.bytes_per_s
        for u in self.uniform:
            out[self.containers[u.members[0]].job] += u.bytes_per_s * u.pairs
        return tuple(out)

    def all_flows(self) -> tuple[Flow, ...]:
        """Explicit flows with the all-to-all traffic spelt out pair by pair (for models
        that only know flows; quadratic in job size)."""
        sums: dict[tuple[int, int], float] = {(f.a, f.b): f.bytes_per_s for f in self.flows}
        for u in self.uniform:
            for i, a in enumerate(u.members):
                for b in u.members[i + 1 :]:
                    sums[a, b] = sums.get((a, b), 0.0) + u.bytes_per_s
        return tuple(Flow(a, b, w) for (a, b), w in sorted(sums.items()))

    @property
    def has_current(self) -> bool:
        return any(h is not None for h in self.current)

    def allowed(self, ci: int, hi: int) -> bool:
        """May container ``ci`` run on host ``hi``? Drained hosts keep only their own."""
        state = self.hosts[hi].state
        return state == "up" or (state == "drain" and self.current[ci] == hi)

    def link_cost(self, h1: int, h2: int) -> float:
        if h1 == h2:
            return 0.0
        if self.hosts[h1].rack == self.hosts[h2].rack:
            return self.same_rack_cost
        return self.cross_rack_cost

    def placement(self, assignment: Assignment) -> Placement:
        return Placement(
            assignment={
                c.name: self.hosts[h].name for c, h in zip(self.containers, assignment, strict=True)
            }
        )

    def assignment_of(self, placement: Placement, source: str) -> Assignment:
        """A complete placement document as host indices, or an InputError naming the gap."""
        partial = self._indices(placement, source)
        missing = [self.containers[i].name for i, h in enumerate(partial) if h is None]
        if missing:
            raise InputError(f"{source}: assignment has no host for container {missing[0]!r}")
        return tuple(h for h in partial if h is not None)

    def _indices(self, placement: Placement, source: str) -> list[int | None]:
        out: list[int | None] = [None] * len(self.containers)
        for cname, hname in placement.assignment.items():
            ci = self.container_by_name.get(cname)
            if ci is None:
                raise InputError(f"{source}: assignment.{cname}: unknown container {cname!r}")
            hi = self.host_by_name.get(hname)
            if hi is None:
                raise InputError(f"{source}: assignment.{cname}: unknown host {hname!r}")
            out[ci] = hi
        return out


def build_instance(
    cluster: Cluster,
    workload: Workload,
    current: Placement | None = None,
    current_source: str = "current placement",
    workload_source: str = "workload",
) -> Instance:
    racks = tuple(dict.fromkeys(h.rack for h in cluster.hosts))
    rack_index = {r: i for i, r in enumerate(racks)}
    hosts = tuple(
        HostSpec(
            name=h.name,
            cores=h.cores,
            domains=h.domains.count,
            devil_tolerance=h.domains.count * cluster.devils_per_domain,
            rack=rack_index[h.rack],
            idle_w=h.power.idle_w,
            slope_w=(h.power.peak_w - h.power.idle_w) / h.cores,
            empty_w=h.power.off_w if cluster.empty_host == "off" else h.power.idle_w,
            state=h.state,
        )
        for h in cluster.hosts
    )
    largest = max(h.cores for h in hosts)
    containers: list[ContainerSpec] = []
    flows: dict[tuple[int, int], float] = {}
    uniform: list[UniformTraffic] = []
    for ji, job in enumerate(workload.jobs):
        base = len(containers)
        local = {c.name: base + k for k, c in enumerate(job.containers)}
        for k, c in enumerate(job.containers):
            if c.cores > largest:
                raise InputError(
                    f"{workload_source}: jobs[{ji}]({job.name}).containers[{k}]({c.name}).cores = "
                    f"{c.cores} is larger than every host (largest has {largest})"
                )
            containers.append(
                ContainerSpec(
                    name=c.name,
                    job=ji,
                    cores=c.cores,
                    memory_bytes=c.memory_bytes,
                    intensity_mpki=c.intensity_mpki,
                    devil=workload.classify(c) == "devil",
                )
            )
        for f in job.traffic:
            a, b = sorted((local[f.src], local[f.dst]))
            flows[(a, b)] = flows.get((a, b), 0.0) + f.bytes_per_s
        if job.all_to_all_bytes_per_s > 0 and len(job.containers) > 1:
            members = tuple(range(base, base + len(job.containers)))
            uniform.append(UniformTraffic(members, 2 * job.all_to_all_bytes_per_s))
    inst = Instance(
        hosts=hosts,
        racks=racks,
        jobs=tuple(j.name for j in workload.jobs),
        containers=tuple(containers),
        flows=tuple(Flow(a, b, w) for (a, b), w in sorted(flows.items()) if w > 0),
        same_rack_cost=cluster.links.same_rack,
        cross_rack_cost=cluster.links.cross_rack,
        current=(None,) * len(containers),
        uniform=tuple(uniform),
    )
    if current is None:
        return inst
    cur = inst._indices(current, current_source)
    load = [0] * len(hosts)
    for ci, hi in enumerate(cur):
        if hi is not None:
            load[hi] += containers[ci].cores
            if hosts[hi].state == "down":
                raise InputError(
                    f"{current_source}: assignment.{containers[ci].name}: host "
                    f"{hosts[hi].name!r} is down"
                )
    for hi, used in enumerate(load):
        if used > hosts[hi].cores:
            raise InputError(
                f"{current_source}: host {hosts[hi].name!r} holds {used} cores of containers "
                f"but has {hosts[hi].cores}"
            )
    return replace(inst, current=tuple(cur))
