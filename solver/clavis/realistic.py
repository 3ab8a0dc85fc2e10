"""Seeded snapshots shaped like what clavisd sends the solver from a running cluster.

``clavis.synthetic`` draws thesis Table 5.3's shape (one host type, identical containers per
job, all-to-all traffic). Real snapshots differ in every way the solver's shortcuts rely on
(issue 12): several host generations in racks of uneven size, drained and down hosts, jobs
of 2-, 4- and 8-core containers side by side, a measured memory per container (no two
alike), intensities on both sides of the devil threshold within one job, traffic shaped by
the application (all-to-all, ring, 2-D stencil, master-worker, none), and a current
placement left fragmented by jobs that came and went. The numbers below are ours,
chosen to be plausible for a mid-2020s x86 cluster on 10-25 GbE; no trace was copied.

Randomness comes only from ``random.Random(spec.seed)``: one seed, one snapshot.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from clavis.documents import write_json_atomic
from clavis.model import Cluster, Placement, Workload
from clavis.synthetic import GIB, host_document

Pattern = Literal["all-to-all", "ring", "stencil", "master-worker", "none"]
PATTERNS: tuple[Pattern, ...] = ("all-to-all", "ring", "stencil", "master-worker", "none")
PAGE = 4096  # measured memory is a whole number of pages


@dataclass(frozen=True)
class HostType:
    name: str
    cores: int
    domains: int  # LLC/NUMA domains
    watts: tuple[float, float, float]  # idle, peak, off (BMC standby)
    share: float  # weight of this type among racks


HOST_TYPES: tuple[HostType, ...] = (
    HostType("thin16", 16, 1, (85.0, 190.0, 7.0), 0.25),
    HostType("std32", 32, 2, (135.0, 320.0, 9.0), 0.35),
    HostType("old32", 32, 4, (160.0, 350.0, 12.0), 0.15),
    HostType("fat64", 64, 4, (210.0, 540.0, 14.0), 0.25),
)

# Containers per job by pattern: MPI-like jobs from 2 to 512 ranks, many of them not a
# power of two; independent copies (no traffic) are small.
_MPI_SIZES = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
_MPI_WEIGHTS = (8, 3, 8, 4, 8, 5, 7, 4, 6, 3, 4, 2, 3, 1, 2, 1, 1)
_LONE_SIZES = (1, 2, 4, 8, 16)
_LONE_WEIGHTS = (5, 3, 3, 2, 1)
_PATTERN_WEIGHTS = (0.2, 0.15, 0.25, 0.15, 0.25)  # in PATTERNS order
_CORE_SIZES = (2, 4, 8)
_CORE_WEIGHTS = (0.35, 0.4, 0.25)


@dataclass(frozen=True)
class RealisticSpec:
    """What to draw. ``utilisation`` is the share of the cores of hosts that are not down
    that the workload uses; ``containers`` instead fixes the container count."""

    hosts: int
    seed: int = 0
    utilisation: float = 0.6
    containers: int | None = None
    current: bool = False
    drained: float = 0.02  # share of hosts in state drain
    down: float = 0.01  # share of hosts in state down
    rack_hosts: tuple[int, int] = (36, 42)  # rack sizes drawn from this range
    churn: float = 2.0  # cores of jobs that came and went, per core of the snapshot's jobs
    power_noise: float = 0.0  # relative spread of fitted per-host watts (0: one model a type)
    threshold_mpki: float = 4.5

    def __post_init__(self) -> None:
        if self.hosts < 2:
            raise ValueError(f"hosts must be at least 2, got {self.hosts}")
        if not 0 < self.utilisation <= 0.9:
            raise ValueError(f"utilisation must be in (0, 0.9], got {self.utilisation}")
        if self.containers is not None and self.containers < 1:
            raise ValueError(f"containers must be positive, got {self.containers}")
        if not (0 <= self.drained < 0.5 and 0 <= self.down < 0.5):
            raise ValueError("drained and down shares must be in [0, 0.5)")
        if not 1 <= self.rack_hosts[0] <= self.rack_hosts[1]:
            raise ValueError(f"rack_hosts must be 1 <= low <= high, got {self.rack_hosts}")
        if self.churn < 0 or not 0 <= self.power_noise < 0.5:
            raise ValueError("churn must be >= 0 and power_noise in [0, 0.5)")


@dataclass(frozen=True)
class Snapshot:
    """The three documents the CLI reads (cluster, workload, current placement or None)."""

    cluster: dict[str, Any]
    workload: dict[str, Any]
    current: dict[str, Any] | None
    patterns: dict[str, Pattern]  # job name -> its traffic pattern (for tests and reports)

    def models(self) -> tuple[Cluster, Workload, Placement | None]:
        placement = None if self.current is None else Placement.model_validate(self.current)
        return (
            Cluster.model_validate(self.cluster),
            Workload.model_validate(self.workload),
            placement,
        )

    def write(self, directory: Path) -> list[Path]:
        """cluster.json, workload.json and (with a current placement) current.json."""
        docs = {"cluster": self.cluster, "workload": self.workload, "current": self.current}
        written = []
        for name, doc in docs.items():
            if doc is not None:
                path = directory / f"{name}.json"
                write_json_atomic(path, doc, indent=None)
                written.append(path)
        return written


# --- traffic patterns: directed edges (src, dst) between container indices of a job ------


def ring_edges(n: int) -> list[tuple[int, int]]:
    """Each rank sends to both neighbours on a ring (a halo exchange in one dimension)."""
    edges = {(k, (k + d) % n) for k in range(n) for d in (1, -1)}
    return sorted(e for e in edges if e[0] != e[1])


def grid_shape(n: int) -> tuple[int, int]:
    """Rows x columns of the most nearly square grid of exactly n cells (MPI_Dims_create)."""
    rows = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    return rows, n // rows


def stencil_edges(n: int) -> list[tuple[int, int]]:
    """A 5-point 2-D stencil on a rows x cols grid, not periodic: each cell exchanges with
    its up, down, left and right neighbours, both ways."""
    rows, cols = grid_shape(n)
    edges = []
    for r in range(rows):
        for c in range(cols):
            k = r * cols + c
            if c + 1 < cols:
                edges += [(k, k + 1), (k + 1, k)]
            if r + 1 < rows:
                edges += [(k, k + cols), (k + cols, k)]
    return sorted(edges)


def master_worker_edges(n: int) -> list[tuple[int, int]]:
    """Rank 0 hands work to every other rank and collects its results."""
    return sorted([(0, k) for k in range(1, n)] + [(k, 0) for k in range(1, n)])


# --- drawing ---------------------------------------------------------------------------


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _hosts(spec: RealisticSpec, rng: random.Random) -> list[dict[str, Any]]:
    """Racks of uneven size, each mostly of one host type (sites buy a rack at a time)."""
    shares = [t.share for t in HOST_TYPES]
    docs: list[dict[str, Any]] = []
    rack = 0
    while len(docs) < spec.hosts:
        size = min(rng.randint(*spec.rack_hosts), spec.hosts - len(docs))
        main = rng.choices(HOST_TYPES, shares)[0]
        for k in range(size):
            kind = main if rng.random() < 0.9 else rng.choices(HOST_TYPES, shares)[0]
            idle, peak, off = kind.watts
            if spec.power_noise > 0:
                # A fitted model per host (clavisd fits each host's BMC readings).
                idle *= 1 + rng.uniform(-spec.power_noise, spec.power_noise)
                peak = max(idle, peak * (1 + rng.uniform(-spec.power_noise, spec.power_noise)))
                idle, peak = round(idle, 1), round(peak, 1)
            name = f"r{rack:03d}n{k:02d}"
            docs.append(host_document(name, f"rack{rack:03d}", kind.cores, kind.domains,
                                      (idle, peak, min(off, idle))))  # fmt: skip
        rack += 1
    return docs


def _intensities(rng: random.Random, n: int, threshold: float) -> list[float]:
    """Per-container MPKI: a clear devil, a clear turtle, or a borderline job whose
    containers fall on both sides of the threshold (phases, data-dependent ranks)."""
    kind = rng.choices(("devil", "turtle", "borderline"), (0.3, 0.45, 0.25))[0]
    if kind == "borderline":
        return [round(threshold * rng.uniform(0.85, 1.15), 3) for _ in range(n)]
    if kind == "devil":
        mean = _log_uniform(rng, 1.5 * threshold, 5 * threshold)
        return [round(max(1.05 * threshold, mean * rng.lognormvariate(0, 0.1)), 3)
                for _ in range(n)]  # fmt: skip
    mean = _log_uniform(rng, 0.05, 0.6 * threshold)
    return [round(min(0.9 * threshold, mean * rng.lognormvariate(0, 0.1)), 3) for _ in range(n)]


def _memories(rng: random.Random, n: int, cores: int, used: set[int], master: bool) -> list[int]:
    """Resident bytes, log-normal around the job's per-core mean, whole pages, and never
    equal to any container drawn before (measured memories never coincide)."""
    mean = cores * _log_uniform(rng, 0.5, 4.0) * GIB
    out = []
    for k in range(n):
        factor = 2.0 if master and k == 0 else 1.0
        pages = max(1, int(mean * factor * rng.lognormvariate(0, 0.25)) // PAGE)
        while pages in used:
            pages += 1
        used.add(pages)
        out.append(pages * PAGE)
    return out


def _traffic(rng: random.Random, pattern: Pattern, names: list[str]) -> dict[str, Any]:
    """The job's traffic fields, in bytes/s per direction."""
    n = len(names)
    if pattern == "none" or n < 2:
        return {}
    if pattern == "all-to-all":
        # Each rank's egress (20-400 MB/s) is shared out over its n-1 peers.
        return {"all_to_all_bytes_per_s": round(_log_uniform(rng, 2e7, 4e8) / (n - 1), 1)}
    if pattern == "master-worker":
        down = min(_log_uniform(rng, 5e6, 5e7), 1.25e9 / (n - 1))  # master's NIC: 10 GbE
        up = _log_uniform(rng, 1e6, 2e7)
        flows = [
            {"src": names[a], "dst": names[b], "bytes_per_s": round(down if a == 0 else up, 1)}
            for a, b in master_worker_edges(n)
        ]
        return {"traffic": flows}
    edges = ring_edges(n) if pattern == "ring" else stencil_edges(n)
    rate = _log_uniform(rng, 2e7, 2.5e8)  # halo exchange with each neighbour
    return {
        "traffic": [
            {
                "src": names[a],
                "dst": names[b],
                "bytes_per_s": round(rate * rng.uniform(0.9, 1.1), 1),
            }
            for a, b in edges
        ]
    }


def _jobs(
    spec: RealisticSpec, rng: random.Random, target_cores: int
) -> tuple[list[dict[str, Any]], dict[str, Pattern]]:
    cap = max(2, min(512, spec.hosts // 2))
    mpi = [(s, w) for s, w in zip(_MPI_SIZES, _MPI_WEIGHTS, strict=True) if s <= cap]
    docs: list[dict[str, Any]] = []
    patterns: dict[str, Pattern] = {}
    used: set[int] = set()
    cores_so_far = count = 0
    while True:
        if spec.containers is not None and count >= spec.containers:
            break
        if spec.containers is None and cores_so_far >= target_cores:
            break
        pattern = rng.choices(PATTERNS, _PATTERN_WEIGHTS)[0]
        if pattern == "none":
            n = rng.choices(_LONE_SIZES, _LONE_WEIGHTS)[0]
        else:
            n = rng.choices([s for s, _ in mpi], [w for _, w in mpi])[0]
        if spec.containers is not None:
            n = min(n, spec.containers - count)
        if n < 2:
            pattern = "none"
        cores = rng.choices(_CORE_SIZES, _CORE_WEIGHTS)[0]
        name = f"j{len(docs):05d}"
        names = [f"{name}-c{k:03d}" for k in range(n)]
        mpki = _intensities(rng, n, spec.threshold_mpki)
        memory = _memories(rng, n, cores, used, pattern == "master-worker")
        containers = [
            {"name": c, "cores": cores, "memory_bytes": m, "intensity_mpki": i}
            for c, m, i in zip(names, memory, mpki, strict=True)
        ]
        docs.append({"name": name, "containers": containers, **_traffic(rng, pattern, names)})
        patterns[name] = pattern
        cores_so_far += n * cores
        count += n
    return docs, patterns


class _FirstFit:
    """First host (in cluster order) with at least ``need`` free cores, in O(log hosts):
    a max segment tree over free cores. Slurm's default selection is first fit too."""

    def __init__(self, free: list[int]) -> None:
        self.size = 1
        while self.size < len(free):
            self.size *= 2
        self.tree = [0] * (2 * self.size)
        self.tree[self.size : self.size + len(free)] = free
        for i in range(self.size - 1, 0, -1):
            self.tree[i] = max(self.tree[2 * i], self.tree[2 * i + 1])

    def free(self, host: int) -> int:
        return self.tree[self.size + host]

    def add(self, host: int, cores: int) -> None:
        i = self.size + host
        self.tree[i] += cores
        i //= 2
        while i:
            self.tree[i] = max(self.tree[2 * i], self.tree[2 * i + 1])
            i //= 2

    def first(self, need: int) -> int | None:
        if self.tree[1] < need:
            return None
        i = 1
        while i < self.size:
            i = 2 * i if self.tree[2 * i] >= need else 2 * i + 1
        return i - self.size


def _fragmented(
    rng: random.Random, hosts: list[dict[str, Any]], jobs: list[dict[str, Any]], churn: float
) -> dict[str, str]:
    """A current placement as a running cluster has it: the snapshot's jobs and transient
    ones arrive in random order and are placed first fit, container by container; while
    they arrive, transient jobs finish and leave holes; at the snapshot all have gone."""
    fit = _FirstFit([0 if h.get("state") == "down" else h["cores"] for h in hosts])
    real = [[(c["name"], c["cores"]) for c in j["containers"]] for j in jobs]
    budget = churn * sum(c for j in real for _, c in j)
    transient: list[list[tuple[str, int]]] = []
    while budget > 0:
        n, cores = rng.choice(_MPI_SIZES[:10]), rng.choice(_CORE_SIZES)
        transient.append([(f"t{len(transient)}-{k}", cores) for k in range(n)])
        budget -= n * cores
    arrivals = [(True, j) for j in real] + [(False, j) for j in transient]
    rng.shuffle(arrivals)
    where: dict[str, int] = {}
    running: list[list[tuple[str, int]]] = []

    def leave(job: list[tuple[str, int]]) -> None:
        for cname, cores in job:
            fit.add(where.pop(cname), cores)

    for keep, job in arrivals:
        if running and rng.random() < 0.5:
            leave(running.pop(rng.randrange(len(running))))
        placed: list[tuple[str, int]] = []
        for cname, cores in job:
            host = fit.first(cores)
            while host is None and running:
                leave(running.pop(rng.randrange(len(running))))
                host = fit.first(cores)
            if host is None and not keep:
                # A transient job the holes cannot take stays in Slurm's queue: it never
                # ran (small clusters, where the snapshot's jobs leave few whole hosts).
                leave(placed)
                placed = []
                break
            if host is None:
                raise ValueError(f"container {cname} ({cores} cores) fits on no host")
            fit.add(host, -cores)
            where[cname] = host
            placed.append((cname, cores))
        if not keep and placed:
            running.append(job)
    for job in running:
        leave(job)
    return {cname: hosts[h]["name"] for cname, h in where.items()}


def generate(spec: RealisticSpec) -> Snapshot:
    """Draw a snapshot; the documents validate (``Snapshot.models``) and are feasible."""
    rng = random.Random(spec.seed)
    hosts = _hosts(spec, rng)
    order = list(range(len(hosts)))
    rng.shuffle(order)
    n_down = round(spec.down * len(hosts))
    n_drain = round(spec.drained * len(hosts))
    for i in order[:n_down]:
        hosts[i]["state"] = "down"
    alive = sum(h["cores"] for h in hosts if h.get("state") != "down")
    jobs, patterns = _jobs(spec, rng, round(spec.utilisation * alive))
    current = _fragmented(rng, hosts, jobs, spec.churn) if spec.current else None
    # Drain hosts that run something when there is a current placement (they keep their
    # containers: Slurm's DRAIN lets running work finish); any up host otherwise.
    busy = set(current.values()) if current is not None else None
    drainable = [i for i in order[n_down:] if busy is None or hosts[i]["name"] in busy]
    for i in drainable[:n_drain]:
        hosts[i]["state"] = "drain"
    need = sum(c["cores"] for j in jobs for c in j["containers"])
    up = sum(h["cores"] for h in hosts if h.get("state", "up") == "up")
    # Container sizes (2, 4, 8) divide every host's cores, so first fit packs any total
    # up to the up hosts' cores; without a current placement that is what must hold.
    if current is None and need > up:
        raise ValueError(f"the jobs need {need} cores but up hosts have {up}: lower utilisation")
    cluster = {
        "schema_version": 1,
        "name": f"realistic-{spec.hosts}-{spec.seed}",
        "hosts": hosts,
        "links": {"same_rack": 1.0, "cross_rack": 4.0},
    }
    workload = {"schema_version": 1, "devil_threshold_mpki": spec.threshold_mpki, "jobs": jobs}
    placement = None if current is None else {"schema_version": 1, "assignment": current}
    return Snapshot(cluster, workload, placement, patterns)
