"""Calm lagging devil jobs by moving their contended devils to hosts without devils.

Under the straggler rule (docs/objectives.md, D) a devil job lags when one of its devil
containers sits on a contended host. Starting from a placement (the current one in a
repack pass, or the best greedy schedule), a job is calmed by moving each of its devils
that sits on a contended host to a host that runs no devil and has room, preferring a
host already on (no switch-on watts), then one in a rack the job already uses (cheaper
traffic), then the cheapest empty host. The move is kept only if the evaluator's F goes
down: it trades contention against power, traffic and migration exactly as F weighs
them. The thesis's fathoming (§5.5.2: a greedy schedule kept when it beats the
incumbent), one job at a time. On a realistic repack pass of 1,024 hosts the current
placement let 8,304 of 8,358 devil cores lag, and no greedy schedule was worth moving
everything (issue 12).
"""

from __future__ import annotations

import time
from collections import Counter

from clavis.instance import Assignment, Instance
from clavis.objectives import (
    Bounds,
    Weights,
    contended_hosts,
    is_contended,
    score,
    straggling_jobs,
)

PASSES = 2  # over the lagging jobs at most


def _order(inst: Instance) -> list[int]:
    """Up hosts, cheapest watts per core of a full host first."""
    up = [h for h, spec in enumerate(inst.hosts) if spec.state == "up"]

    def rate(h: int) -> float:
        spec = inst.hosts[h]
        return (spec.idle_w - spec.empty_w) / spec.cores + spec.slope_w

    return sorted(up, key=lambda h: (rate(h), h))


def improve(
    inst: Instance,
    weights: Weights,
    limits: Bounds,
    assignment: Assignment,
    *,
    deadline: float,
) -> Assignment | None:
    """A placement with a lower F than ``assignment`` made by calming jobs, or None."""
    where = list(assignment)
    best = score(inst, assignment, weights, limits).F
    devil_cores: Counter[int] = Counter()
    devils_of: dict[int, list[int]] = {}
    for i, c in enumerate(inst.containers):
        if c.devil:
            devil_cores[c.job] += c.cores
            devils_of.setdefault(c.job, []).append(i)
    hosts = _order(inst)
    improved = False
    # A job calmed moves devils off contended hosts, which may leave another job's devils
    # calm or cheaper to calm: a few passes, until one changes nothing.
    for _pass in range(PASSES):
        lagging = straggling_jobs(inst, tuple(where))
        # Most devil cores calmed per devil moved first.
        jobs = sorted(lagging, key=lambda j: (-devil_cores[j] / len(devils_of[j]), j))
        changed = False
        for j in jobs:
            if time.monotonic() >= deadline:
                return tuple(where) if improved else None
            trial = _calm(inst, where, j, devils_of[j], hosts)
            if trial is None:
                continue
            f = score(inst, tuple(trial), weights, limits).F
            if f < best - 1e-12 * max(1.0, best):
                best, where, improved, changed = f, trial, True, True
        if not changed:
            break
    return tuple(where) if improved else None


def _calm(
    inst: Instance, where: list[int], job: int, devils: list[int], hosts: list[int]
) -> list[int] | None:
    """``where`` with the job's contended devils moved to hosts without devils, or None
    when some devil finds no such host with room."""
    hot = contended_hosts(inst, tuple(where))
    moving = [d for d in devils if where[d] in hot]
    if not moving:
        return None
    free = {h: inst.hosts[h].cores for h in hosts}
    devils_on: Counter[int] = Counter()  # devil containers per host
    cores_on: Counter[int] = Counter()  # devil cores per host
    busy: set[int] = set()
    for i, h in enumerate(where):
        if h in free:
            free[h] -= inst.containers[i].cores
        busy.add(h)
        if inst.containers[i].devil:
            devils_on[h] += 1
            cores_on[h] += inst.containers[i].cores
    racks = {inst.hosts[where[i]].rack for i in range(len(where)) if inst.containers[i].job == job}
    out = list(where)
    for d in moving:
        here, need = out[d], inst.containers[d].cores
        if not is_contended(devils_on[here], cores_on[here], inst.hosts[here].devil_tolerance):
            continue  # calm now that others of the job left
        spots = [h for h in hosts if devils_on[h] == 0 and free[h] >= need]
        if not spots:
            return None
        # On already (no switch-on), then in a rack of the job, then cheapest (hosts order).
        h = min(spots, key=lambda h: (h not in busy, inst.hosts[h].rack not in racks))
        out[d] = h
        free[h] -= need
        for at, sign in ((here, -1), (h, 1)):
            devils_on[at] += sign
            cores_on[at] += sign * need
        busy.add(h)
    return out
