"""What a talking job must pay in C and M together when it is repacked (issue 12).

A repack's relaxation (pool.py) may keep a share of a job's residents and move the rest:
it interpolates between "all stay" (M 0, today's C) and "all move" (all its memory, C at
its floor), while a real placement of a stencil spread over five hosts must move whole
rows to reach its floor. Here each small talking job is placed alone, every host it may
use empty (other jobs relaxed away), and CP-SAT proves the least k_c * C + k_m * M that
job can reach: a valid floor for its C and M together in any placement. The thesis has
no M (§6.8), so this is Clavis's own.

Hosts the job may use: those its residents are on, at full size (a drained one only for
its own residents), and per rack of theirs as many fresh hosts as the rack has other up
hosts (up to one per container), the largest size there; other racks are one rack of
fresh hosts of the largest size elsewhere. More room than the cluster has only lowers
the floor."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass

from ortools.sat.python import cp_model

from clavis.instance import Instance

# Jobs above this many containers are left to the pool's own rows: the model grows with
# containers times hosts, and large jobs sit whole on few hosts already.
MAX_CONTAINERS = 24
# CP-SAT's work per job at most, in its deterministic time (the same bound on any
# machine); its proven bound is used whether or not it finished. The 3x4 stencil on five
# hosts of the test needs about 1 s of wall time to prove its rows.
JOB_WORK = 1.0
# Integer objective scale: coefficients are floored, so the floor loses at most the
# number of terms over this (relative to the largest possible value).
SCALE = 1_000_000


@dataclass(frozen=True)
class _Place:
    host: int | None  # a real host (a resident's), or None for a fresh one
    rack: int  # a rack index, or -1 for the racks none of its residents are on
    cores: int


def _places(inst: Instance, cis: tuple[int, ...]) -> list[_Place]:
    homes = sorted({hi for ci in cis if (hi := inst.current[ci]) is not None})
    racks = {inst.hosts[hi].rack for hi in homes}
    out = [_Place(hi, inst.hosts[hi].rack, inst.hosts[hi].cores) for hi in homes]
    spare: dict[int, list[int]] = defaultdict(list)
    for hi, spec in enumerate(inst.hosts):
        if spec.state == "up" and hi not in homes:
            spare[spec.rack if spec.rack in racks else -1].append(spec.cores)
    for rack, sizes in sorted(spare.items()):
        out += [_Place(None, rack, max(sizes))] * min(len(cis), len(sizes))
    return out


def _flows(inst: Instance, cis: tuple[int, ...]) -> dict[tuple[int, int], float]:
    """The job's bytes/s per pair of its containers (by rank in ``cis``), both ways."""
    at = {ci: k for k, ci in enumerate(cis)}
    out: dict[tuple[int, int], float] = defaultdict(float)
    for f in inst.flows:
        if f.a in at and f.b in at:
            out[min(at[f.a], at[f.b]), max(at[f.a], at[f.b])] += f.bytes_per_s
    for u in inst.uniform:
        if u.members and u.members[0] in at:
            for i, a in enumerate(u.members):
                for b in u.members[i + 1 :]:
                    out[at[a], at[b]] += u.bytes_per_s
    return out


def _choices(
    inst: Instance, model: cp_model.CpModel, cis: tuple[int, ...], places: list[_Place]
) -> dict[tuple[int, int], cp_model.IntVar] | None:
    """x[k, p]: container k on place p, one place each, within each place's cores."""
    # Fresh hosts of one rack are alike: numbered by their first container, the j-th of
    # a rack holds no container before the j-th (bin packing's usual symmetry breaking).
    rank = [
        sum(1 for q in places[:p] if q.host is None and q.rack == place.rack)
        for p, place in enumerate(places)
    ]
    x: dict[tuple[int, int], cp_model.IntVar] = {}
    for k, ci in enumerate(cis):
        for p, place in enumerate(places):
            if place.host is None:
                if rank[p] <= k:
                    x[k, p] = model.new_bool_var(f"x{k}_{p}")
            elif inst.allowed(ci, place.host):
                x[k, p] = model.new_bool_var(f"x{k}_{p}")
        options = [v for (kk, _), v in x.items() if kk == k]
        if not options:
            return None
        model.add_exactly_one(options)
    for p, place in enumerate(places):
        load = [inst.containers[ci].cores * x[k, p] for k, ci in enumerate(cis) if (k, p) in x]
        if load:
            model.add(sum(load) <= place.cores)
    return x


def _together(
    model: cp_model.CpModel,
    x: dict[tuple[int, int], cp_model.IntVar],
    pair: tuple[int, int],
    where: list[list[int]],
) -> list[cp_model.IntVar]:
    """Per set of places, a variable that may be 1 only if both containers are there."""
    out = []
    for ps in where:
        both = model.new_bool_var("")
        for k in pair:
            mine = [x[k, p] for p in ps if (k, p) in x]
            if mine:
                model.add(sum(mine) >= both)
            else:
                model.add(both == 0)
        out.append(both)
    return out


def job_floor(inst: Instance, job: int, k_c: float, k_m: float, deadline: float) -> float | None:
    """A proven lower bound on k_c * C_job + k_m * M_job over every placement, or None
    when the job is too large, has no traffic, or the deadline comes first."""
    cis = inst.job_containers[job]
    if len(cis) > MAX_CONTAINERS or len(cis) < 2 or time.monotonic() >= deadline:
        return None
    flows = _flows(inst, cis)
    if not flows:
        return None
    places = _places(inst, cis)
    model = cp_model.CpModel()
    x = _choices(inst, model, cis, places)
    if x is None:
        return None
    same, cross = inst.same_rack_cost, inst.cross_rack_cost
    largest = sum(flows.values()) * max(same, cross) * k_c
    largest += sum(inst.containers[ci].memory_bytes for ci in cis) * k_m
    if largest <= 0:
        return None
    # Integers for CP-SAT: every coefficient scaled and floored, the constant too, so the
    # model's objective is never above the true one and its proven bound stays valid.
    scale = SCALE / largest
    constant = 0.0
    terms: list[tuple[cp_model.IntVar, int]] = []
    hosts = [[p] for p in range(len(places))]
    racks = [
        [p for p, place in enumerate(places) if place.rack == r]
        for r in sorted({place.rack for place in places})
    ]
    for pair, w in flows.items():
        # a flow costs cross - (cross - same) * (same rack) - same * (same host)
        on_host = _together(model, x, pair, hosts)
        in_rack = _together(model, x, pair, racks)
        model.add(sum(on_host) <= sum(in_rack))
        sent = k_c * w * scale
        constant += cross * sent
        terms += [(v, math.floor(-same * sent)) for v in on_host]
        terms += [(v, math.floor(-(cross - same) * sent)) for v in in_rack]
    for k, ci in enumerate(cis):
        home = next((p for p, place in enumerate(places) if place.host == inst.current[ci]), None)
        if inst.current[ci] is None or home is None or (k, home) not in x:
            continue
        memory = k_m * inst.containers[ci].memory_bytes * scale  # M unless it stays
        constant += memory
        terms.append((x[k, home], math.floor(-memory)))
    model.minimize(sum(c * v for v, c in terms))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_deterministic_time = JOB_WORK
    solver.parameters.max_time_in_seconds = max(0.01, deadline - time.monotonic())
    code = solver.solve(model)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return max(0.0, (math.floor(constant) + solver.best_objective_bound) / scale)
