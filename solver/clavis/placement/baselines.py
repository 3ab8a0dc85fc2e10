"""Placements without search: Slurm-style CoreRR / NodeRR (thesis §5.2) and random search
(thesis Table 5.3 row 0)."""

from __future__ import annotations

import random

from clavis.instance import Assignment, Instance
from clavis.objectives import Weights, bounds, score
from clavis.placement.result import PlacementResult, SolveOptions, Status, Stopwatch

NODERR_FRACTION = 0.5  # thesis Fig. 5.2: NodeRR gives each 24-core node 12 processes


def _fill(
    inst: Instance, order: list[int], share: list[int], out: list[int], free: list[int]
) -> list[int]:
    """Walk hosts in order, placing each container on the current host while it fits in
    that host's ``share``; return the containers that did not fit anywhere."""
    left = []
    h = 0
    for ci in order:
        need = inst.containers[ci].cores
        while h < len(inst.hosts) and (free[h] < need or share[h] < need):
            h += 1
        if h == len(inst.hosts):
            left.append(ci)
            continue
        out[ci] = h
        free[h] -= need
        share[h] -= need
    return left


def round_robin(inst: Instance, fraction: float) -> Assignment | None:
    """Fill ``fraction`` of each host's cores in host order, then first-fit what is left."""
    out = [-1] * len(inst.containers)
    free = [h.cores if h.state == "up" else 0 for h in inst.hosts]
    share = [max(1, int(h.cores * fraction)) for h in inst.hosts]
    left = _fill(inst, list(range(len(inst.containers))), share, out, free)
    for ci in left:  # second pass: any host with room, in order
        need = inst.containers[ci].cores
        h = next((k for k, f in enumerate(free) if f >= need), None)
        if h is None:
            return None
        out[ci] = h
        free[h] -= need
    return tuple(out)


def corerr(inst: Instance) -> Assignment | None:
    """Slurm block distribution: fill every core of a host before the next (CoreRR)."""
    return round_robin(inst, 1.0)


def noderr(inst: Instance) -> Assignment | None:
    """Slurm cyclic-like spreading: a fixed share of each host first (NodeRR)."""
    return round_robin(inst, NODERR_FRACTION)


def random_assignment(inst: Instance, rng: random.Random) -> Assignment | None:
    """Containers in random order, each on a random host with room (first fit if none)."""
    out = [-1] * len(inst.containers)
    free = [h.cores if h.state == "up" else 0 for h in inst.hosts]
    order = list(range(len(inst.containers)))
    rng.shuffle(order)
    nh = len(inst.hosts)
    for ci in order:
        need = inst.containers[ci].cores
        pick = None
        for _ in range(8):
            h = rng.randrange(nh)
            if free[h] >= need:
                pick = h
                break
        if pick is None:
            start = rng.randrange(nh)
            pick = next((h for k in range(nh) if free[h := (start + k) % nh] >= need), None)
        if pick is None:
            return None
        out[ci] = pick
        free[pick] -= need
    return tuple(out)


def random_search(inst: Instance, weights: Weights, options: SolveOptions) -> PlacementResult:
    """Best of random placements until the time limit (thesis Table 5.3 row 0)."""
    watch = Stopwatch(options)
    rng = random.Random(options.seed)
    limits = bounds(inst)
    best: Assignment | None = None
    best_score = None
    tries = 0
    while not watch.expired:
        tries += 1
        cand = random_assignment(inst, rng)
        if cand is None:
            break  # random first fit failed; the instance may be too tight for it
        s = score(inst, cand, weights, limits)
        if watch.offer(s.F):
            best, best_score = cand, s
    status: Status = "FEASIBLE" if best is not None else "UNKNOWN"
    return PlacementResult(
        "random", status, best, best_score, None, watch.elapsed, tuple(watch.trajectory)
    )
