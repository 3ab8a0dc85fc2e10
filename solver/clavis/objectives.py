"""The one evaluator: P, D, C, M of a placement, their bounds, normalisation and F.

Every solver, the planner, the simulator and the UI score placements here. The
definitions, the bounds and a worked example are in ``docs/objectives.md``.

- P  watts: busy host = idle + slope * busy cores; empty host = its empty watts.
- D  contended devil cores (thesis §5.5 "diversified intensity", negated so that lower
     is better). A host is contended when it runs two or more devil containers whose
     devil cores exceed its tolerance (LLC/NUMA domains x devils_per_domain): DINO
     (thesis §3.3.3) spreads devils one per domain, so only the excess contends.
     Straggler rule (thesis §5.5): a job with any devil container on a contended host
     earns no de-contention credit, so all of its devil cores count.
- C  slow-link traffic: bytes/s of every flow times its link class cost.
- M  bytes of container memory moved away from the current placement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from clavis.instance import Assignment, HostSpec, Instance

OBJECTIVES = ("P", "D", "C", "M")


@dataclass(frozen=True)
class Objectives:
    """One value per objective; raw (units above) or normalised to [0, 1]."""

    P: float
    D: float
    C: float
    M: float

    def as_tuple(self) -> tuple[float, float, float, float]:
        return (self.P, self.D, self.C, self.M)


@dataclass(frozen=True)
class Weights:
    """Weights a, b, c, m of F = a*P_n + b*D_n + c*C_n + m*M_n; stored scaled to sum 1."""

    P: float
    D: float
    C: float
    M: float = 0.0

    def __post_init__(self) -> None:
        vals = self.as_tuple()
        if any(not np.isfinite(v) or v < 0 for v in vals):
            raise ValueError(f"weights must be finite and non-negative, got {vals}")
        total = sum(vals)
        if total <= 0:
            raise ValueError("at least one weight must be positive")
        # Only ratios matter (thesis §5.5.1): store them scaled to sum 1.
        for name, v in zip(OBJECTIVES, vals, strict=True):
            object.__setattr__(self, name, v / total)

    def as_tuple(self) -> tuple[float, float, float, float]:
        return (self.P, self.D, self.C, self.M)

    @staticmethod
    def parse(text: str) -> Weights:
        parts = [p.strip() for p in text.split(",")]
        if len(parts) not in (3, 4):
            raise ValueError(f"expected 3 or 4 comma-separated weights a,b,c[,m], got {text!r}")
        try:
            vals = [float(p) for p in parts]
        except ValueError as exc:
            raise ValueError(f"weights must be numbers, got {text!r}") from exc
        return Weights(*vals)


@dataclass(frozen=True)
class Bounds:
    """Computed [lo, hi] per objective; see docs/objectives.md for how each is derived."""

    lo: Objectives
    hi: Objectives

    def normalise(self, raw: Objectives) -> Objectives:
        out = []
        for v, lo, hi in zip(raw.as_tuple(), self.lo.as_tuple(), self.hi.as_tuple(), strict=True):
            out.append(0.0 if hi <= lo else (v - lo) / (hi - lo))
        return Objectives(*out)

    def linear(self, weights: Weights) -> tuple[tuple[float, float, float, float], float]:
        """Coefficients k and offset such that F = sum(k_i * raw_i) + offset."""
        coefs: list[float] = []
        offset = 0.0
        for w, lo, hi in zip(
            weights.as_tuple(), self.lo.as_tuple(), self.hi.as_tuple(), strict=True
        ):
            k = 0.0 if hi <= lo else w / (hi - lo)
            coefs.append(k)
            offset -= k * lo
        return (coefs[0], coefs[1], coefs[2], coefs[3]), offset


@dataclass(frozen=True)
class Score:
    raw: Objectives
    normalised: Objectives
    F: float


# --- the objectives -------------------------------------------------------------------


def host_loads(inst: Instance, assignment: Assignment) -> list[int]:
    load = [0] * len(inst.hosts)
    for c, h in zip(inst.containers, assignment, strict=True):
        load[h] += c.cores
    return load


def host_watts(spec: HostSpec, used: int) -> float:
    """A host's watts with ``used`` cores busy: its linear model, or empty_w when idle."""
    return (spec.idle_w + spec.slope_w * used) if used > 0 else spec.empty_w


def power(inst: Instance, assignment: Assignment) -> float:
    load = host_loads(inst, assignment)
    return sum(host_watts(h, used) for h, used in zip(inst.hosts, load, strict=True))


def is_contended(devils: int, devil_cores: int, tolerance: int) -> bool:
    """A host is contended when it runs two or more devil containers whose devil cores
    exceed its tolerance (docs/objectives.md, D)."""
    return devils >= 2 and devil_cores > tolerance


def contended_hosts(inst: Instance, assignment: Assignment) -> set[int]:
    devils = [0] * len(inst.hosts)
    devil_cores = [0] * len(inst.hosts)
    for c, h in zip(inst.containers, assignment, strict=True):
        if c.devil:
            devils[h] += 1
            devil_cores[h] += c.cores
    return {
        h
        for h, spec in enumerate(inst.hosts)
        if is_contended(devils[h], devil_cores[h], spec.devil_tolerance)
    }


def straggling_jobs(inst: Instance, assignment: Assignment) -> set[int]:
    hot = contended_hosts(inst, assignment)
    return {c.job for c, h in zip(inst.containers, assignment, strict=True) if c.devil and h in hot}


def contention(inst: Instance, assignment: Assignment) -> float:
    lagging = straggling_jobs(inst, assignment)
    return float(sum(c.cores for c in inst.containers if c.devil and c.job in lagging))


def flow_arrays(
    inst: Instance,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Every flow's two containers and bytes/s, as arrays (C here, regroup's W)."""
    a = np.fromiter((f.a for f in inst.flows), dtype=np.int64, count=len(inst.flows))
    b = np.fromiter((f.b for f in inst.flows), dtype=np.int64, count=len(inst.flows))
    w = np.fromiter((f.bytes_per_s for f in inst.flows), dtype=np.float64, count=len(inst.flows))
    return a, b, w


def traffic(inst: Instance, assignment: Assignment) -> float:
    if not inst.flows and not inst.uniform:
        return 0.0
    where = np.asarray(assignment, dtype=np.int64)
    rack = np.fromiter((h.rack for h in inst.hosts), dtype=np.int64, count=len(inst.hosts))
    total = 0.0
    if inst.flows:
        a, b, w = flow_arrays(inst)
        ha, hb = where[a], where[b]
        cost = np.where(
            ha == hb,
            0.0,
            np.where(rack[ha] == rack[hb], inst.same_rack_cost, inst.cross_rack_cost),
        )
        total += float(np.dot(w, cost))
    for u in inst.uniform:
        # Same formula as the flows, counted by place: pairs inside a host cost nothing,
        # pairs inside a rack cost same_rack, the rest cross_rack.
        hosts = where[list(u.members)]
        same_host = _pairs_within(np.bincount(hosts))
        same_rack = _pairs_within(np.bincount(rack[hosts]))
        total += u.bytes_per_s * (
            inst.same_rack_cost * (same_rack - same_host)
            + inst.cross_rack_cost * (u.pairs - same_rack)
        )
    return total


def _pairs_within(counts: npt.NDArray[np.int64]) -> int:
    return int(np.sum(counts * (counts - 1)) // 2)


def migration(inst: Instance, assignment: Assignment) -> float:
    return float(
        sum(
            c.memory_bytes
            for c, cur, new in zip(inst.containers, inst.current, assignment, strict=True)
            if cur is not None and cur != new
        )
    )


def evaluate(inst: Instance, assignment: Assignment) -> Objectives:
    if len(assignment) != len(inst.containers):
        raise ValueError(
            f"assignment has {len(assignment)} entries for {len(inst.containers)} containers"
        )
    return Objectives(
        P=power(inst, assignment),
        D=contention(inst, assignment),
        C=traffic(inst, assignment),
        M=migration(inst, assignment),
    )


def violations(inst: Instance, assignment: Assignment) -> list[str]:
    """Solver-free feasibility check: every host within its cores, every index valid."""
    if len(assignment) != len(inst.containers):
        return [f"{len(assignment)} hosts given for {len(inst.containers)} containers"]
    bad = [
        f"container {inst.containers[i].name!r} on unknown host index {h}"
        for i, h in enumerate(assignment)
        if not 0 <= h < len(inst.hosts)
    ]
    if bad:
        return bad
    bad = [
        f"container {inst.containers[i].name!r} on host {inst.hosts[h].name!r} "
        f"which is {inst.hosts[h].state}"
        for i, h in enumerate(assignment)
        if not inst.allowed(i, h)
    ]
    if bad:
        return bad
    return [
        f"host {h.name!r} holds {used} cores but has {h.cores}"
        for h, used in zip(inst.hosts, host_loads(inst, assignment), strict=True)
        if used > h.cores
    ]


# --- bounds and the weighted sum ------------------------------------------------------


def min_hosts_needed(inst: Instance) -> int:
    """Fewest hosts whose cores add up to the demand (a valid lower bound on hosts used)."""
    demand = sum(c.cores for c in inst.containers)
    got = 0
    for k, cores in enumerate(sorted((h.cores for h in inst.hosts), reverse=True), start=1):
        got += cores
        if got >= demand:
            return k
    return len(inst.hosts)


def bounds(inst: Instance) -> Bounds:
    cores = sum(c.cores for c in inst.containers)
    base = sum(h.empty_w for h in inst.hosts)
    switch_on = sorted(h.idle_w - h.empty_w for h in inst.hosts)
    slopes = [h.slope_w for h in inst.hosts]
    most_used = min(len(inst.containers), len(inst.hosts))
    p_lo = base + sum(switch_on[: min_hosts_needed(inst)]) + cores * min(slopes)
    p_hi = base + sum(switch_on[len(switch_on) - most_used :]) + cores * max(slopes)
    d_hi = float(sum(c.cores for c in inst.containers if c.devil))
    single_rack = len({h.rack for h in inst.hosts}) == 1
    worst_link = inst.same_rack_cost if single_rack else inst.cross_rack_cost
    c_hi = sum(inst.job_traffic) * worst_link
    placed = zip(inst.containers, inst.current, strict=True)
    m_hi = float(sum(c.memory_bytes for c, cur in placed if cur is not None))
    return Bounds(
        lo=Objectives(P=p_lo, D=0.0, C=0.0, M=0.0),
        hi=Objectives(P=p_hi, D=d_hi, C=c_hi, M=m_hi),
    )


def weighted_sum(normalised: Objectives, weights: Weights) -> float:
    return math.fsum(w * v for w, v in zip(weights.as_tuple(), normalised.as_tuple(), strict=True))


def score(
    inst: Instance, assignment: Assignment, weights: Weights, limits: Bounds | None = None
) -> Score:
    limits = limits or bounds(inst)
    raw = evaluate(inst, assignment)
    norm = limits.normalise(raw)
    return Score(raw=raw, normalised=norm, F=weighted_sum(norm, weights))
