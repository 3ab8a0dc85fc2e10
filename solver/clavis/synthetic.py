"""Seeded synthetic clusters and workloads for benchmarks, tests and demos.

Thesis Table 5.3 drew its solver instances from "SPEC MPI/HEP intensities and communication
patterns" without publishing them. The profiles below are illustrative stand-ins: the
classes follow the thesis and DI literature (milc, soplex, lbm, GemsFDTD, leslie3d are
memory-intensive; namd, povray, tachyon, gamess are not), the numbers are ours.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from clavis.model import Cluster, Workload

GIB = 2**30


@dataclass(frozen=True)
class Profile:
    name: str
    suite: str  # "mpi": SPEC MPI2007-like, ranks talk; "hep": HEP-SPEC-like, independent copies
    mpki: float
    pair_bytes_per_s: float  # each direction, between every two containers of the job
    memory_gib: int


PROFILES: tuple[Profile, ...] = (
    Profile("milc", "mpi", 21.0, 4e6, 6),
    Profile("leslie3d", "mpi", 14.0, 6e6, 5),
    Profile("GemsFDTD", "mpi", 17.5, 5e6, 8),
    Profile("lu", "mpi", 6.5, 2e7, 4),
    Profile("pop2", "mpi", 3.1, 3e7, 4),
    Profile("lammps", "mpi", 1.4, 8e6, 3),
    Profile("socorro", "mpi", 8.2, 1.2e7, 6),
    Profile("tachyon", "mpi", 0.3, 5e5, 2),
    Profile("zeusmp", "mpi", 4.9, 7e6, 5),
    Profile("soplex", "hep", 23.0, 0.0, 3),
    Profile("omnetpp", "hep", 12.0, 0.0, 2),
    Profile("namd", "hep", 0.4, 0.0, 1),
    Profile("povray", "hep", 0.1, 0.0, 1),
    Profile("dealII", "hep", 2.2, 0.0, 2),
)


def host_document(
    name: str, rack: str, cores: int, domains: int, watts: tuple[float, float, float]
) -> dict[str, Any]:
    """A host of ``cores`` in ``domains`` equal LLC domains; watts = (idle, peak, off)."""
    return {
        "name": name,
        "rack": rack,
        "cores": cores,
        "domains": {"count": domains, "cores_per_domain": cores // domains},
        "power": {"idle_w": watts[0], "peak_w": watts[1], "off_w": watts[2]},
    }


def parapluie_hosts(count: int, hosts_per_rack: int = 32) -> list[dict[str, Any]]:
    """Hosts shaped like the thesis's Parapluie nodes: 24 cores in 4 LLC domains."""
    return [
        host_document(f"n{i:04d}", f"rack{i // hosts_per_rack:02d}", 24, 4, (160.0, 280.0, 12.0))
        for i in range(count)
    ]


def job_document(
    name: str,
    profile: Profile,
    containers: int,
    cores: int,
    rng: random.Random,
    *,
    compact: bool = False,
) -> dict[str, Any]:
    """One job of ``containers`` identical containers with all-to-all traffic (MPI),
    listed flow by flow, or as ``all_to_all_bytes_per_s`` when ``compact``."""
    # +-10% jitter on intensity keeps the class but makes jobs differ.
    mpki = round(profile.mpki * rng.uniform(0.9, 1.1), 2)
    names = [f"{name}-c{k:03d}" for k in range(containers)]
    doc: dict[str, Any] = {
        "name": name,
        "containers": [
            {
                "name": n,
                "cores": cores,
                "memory_bytes": profile.memory_gib * GIB,
                "intensity_mpki": mpki,
            }
            for n in names
        ],
    }
    if profile.pair_bytes_per_s > 0 and containers > 1 and compact:
        doc["all_to_all_bytes_per_s"] = profile.pair_bytes_per_s
    elif profile.pair_bytes_per_s > 0 and containers > 1:
        doc["traffic"] = [
            {"src": a, "dst": b, "bytes_per_s": profile.pair_bytes_per_s}
            for a in names
            for b in names
            if a != b
        ]
    return doc


def table53_instance(
    seed: int,
    jobs: int = 8,
    max_containers: int = 128,
    cores_per_container: int = 12,
    hosts: int | None = None,
    *,
    min_containers: int | None = None,
    compact: bool = False,
) -> tuple[Cluster, Workload]:
    """Thesis Table 5.3 setup: jobs of up to ``max_containers`` containers on ``hosts``
    Parapluie-like hosts; by default as many hosts as containers (so every container
    could have a host alone). The thesis used "nodes = max containers (<= 1024)".
    Job sizes are drawn from [min_containers (default max/4), max_containers]."""
    rng = random.Random(seed)
    docs = []
    for j in range(jobs):
        profile = rng.choice(PROFILES)
        low = min_containers or max(1, max_containers // 4)
        size = rng.randint(low, max_containers)
        docs.append(
            job_document(
                f"j{j}-{profile.name}", profile, size, cores_per_container, rng, compact=compact
            )
        )
    total = hosts or sum(len(d["containers"]) for d in docs)
    cluster = Cluster.model_validate({"name": f"table53-{seed}", "hosts": parapluie_hosts(total)})
    return cluster, Workload.model_validate({"jobs": docs})


def small_instance(rng: random.Random) -> tuple[Cluster, Workload, dict[str, str] | None]:
    """A random instance small enough for exact enumeration (tests: solver vs oracle)."""
    nhosts = rng.randint(2, 4)
    hosts: list[dict[str, Any]] = []
    for i in range(nhosts):
        rack = f"r{i % rng.randint(1, 2)}"
        hosts.append(host_document(f"h{i}", rack, 4, rng.choice([1, 2]), (50.0, 90.0, 5.0)))
    jobs: list[dict[str, Any]] = []
    left = rng.randint(3, 6)
    j = 0
    while left > 0:
        size = min(left, rng.randint(1, 3))
        left -= size
        names = [f"j{j}c{k}" for k in range(size)]
        devil = rng.random() < 0.5
        job: dict[str, Any] = {
            "name": f"j{j}",
            "containers": [
                {
                    "name": n,
                    "cores": rng.choice([1, 2]),
                    "memory_bytes": rng.randint(1, 8) * GIB,
                    "intensity_mpki": rng.uniform(5, 20) if devil else rng.uniform(0, 4),
                }
                for n in names
            ],
        }
        flows = [
            {"src": a, "dst": b, "bytes_per_s": float(rng.randint(1, 9) * 10**6)}
            for a in names
            for b in names
            if a != b and rng.random() < 0.6
        ]
        if flows:
            job["traffic"] = flows
        jobs.append(job)
        j += 1
    cluster = Cluster.model_validate({"hosts": hosts})
    workload = Workload.model_validate({"jobs": jobs})
    if rng.random() < 0.5:
        return cluster, workload, None
    free = {h.name: h.cores for h in cluster.hosts}
    current: dict[str, str] = {}
    for jb in workload.jobs:
        for c in jb.containers:
            fits = [name for name, f in free.items() if f >= c.cores]
            if fits:
                where = rng.choice(fits)
                free[where] -= c.cores
                current[c.name] = where
    return cluster, workload, current


def enumerable_instance(seed: int, hosts: int = 4, containers: int = 8) -> tuple[Cluster, Workload]:
    """Two racks of 4-core hosts and jobs of two containers (one to two cores, a random
    class, traffic inside each job): every placement can be enumerated."""
    rng = random.Random(seed)
    # Hosts of different generations (idle and peak watts differ) give P many levels,
    # so the front has real trade-offs instead of a handful of corners.
    host_docs = []
    for i in range(hosts):
        idle = rng.uniform(40, 90)
        watts = (idle, idle + rng.uniform(20, 80), 6.0)
        host_docs.append(host_document(f"h{i}", f"r{i * 2 // hosts}", 4, 2, watts))
    jobs = []
    for j in range(containers // 2):
        devil = rng.random() < 0.5
        names = [f"j{j}a", f"j{j}b"]
        jobs.append(
            {
                "name": f"j{j}",
                "containers": [
                    {
                        "name": n,
                        "cores": rng.choice([1, 2]),
                        "memory_bytes": GIB,
                        "intensity_mpki": rng.uniform(6, 20) if devil else rng.uniform(0, 3),
                    }
                    for n in names
                ],
                "traffic": [
                    {"src": names[0], "dst": names[1], "bytes_per_s": rng.randint(1, 9) * 1e6}
                ],
            }
        )
    return Cluster.model_validate({"hosts": host_docs}), Workload.model_validate({"jobs": jobs})
