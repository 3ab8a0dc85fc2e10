"""Calm lagging devil jobs by moving their contended devils to hosts they leave calm.

Under the straggler rule (docs/objectives.md, D) a devil job lags when one of its devil
containers sits on a contended host. Starting from a placement (the current one in a
repack pass, or the best greedy schedule), a job is calmed by moving each of its devils
that sits on a contended host to a host it leaves calm. A host without room makes room
by sending turtles the other way (a swap, which keeps both hosts' loads and so P); the
host chosen is the one where switching it on, the turtles sent (their traffic, and
their bytes when they sit where they started) and leaving the job's racks cost least.
The move is kept only if the evaluator's F goes down: it trades contention against
power, traffic and migration exactly as F weighs them. The thesis's fathoming (§5.5.2:
a greedy schedule kept when it beats the incumbent), one job at a time. On a realistic
repack pass of 1,024 hosts the current placement let 8,304 of 8,358 devil cores lag,
and no greedy schedule was worth moving everything (issue 12); swaps took the calmed
repack start from F 0.352 to 0.346 on seed 1 and from 0.372 to 0.365 on seed 2.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from clavis.instance import Assignment, Instance
from clavis.objectives import (
    Bounds,
    Weights,
    is_contended,
    score,
    straggling_jobs,
)
from clavis.placement.fathom import watts_per_core

PASSES = 2  # over the lagging jobs at most


def _order(inst: Instance) -> list[int]:
    """Up hosts, cheapest watts per core of a full host first."""
    up = [h for h, spec in enumerate(inst.hosts) if spec.state == "up"]
    return sorted(up, key=lambda h: (watts_per_core(inst.hosts[h]), h))


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
        prices = _Prices.of(inst, weights, limits, where, hosts)
        lagging = straggling_jobs(inst, tuple(where))
        # Most devil cores calmed per devil moved first.
        jobs = sorted(lagging, key=lambda j: (-devil_cores[j] / len(devils_of[j]), j))
        changed = False
        for j in jobs:
            if time.monotonic() >= deadline:
                return tuple(where) if improved else None
            room = _Room(inst, where, hosts, prices)
            trial = _calm(inst, where, j, devils_of[j], room, deadline=deadline)
            if trial is None:
                continue
            f = score(inst, tuple(trial), weights, limits).F
            if f < best - 1e-12 * max(1.0, best):
                best, where, improved, changed = f, trial, True, True
        if not changed:
            break
    return tuple(where) if improved else None


@dataclass(frozen=True)
class _Prices:
    """What a step may cost at most in weighted F, to choose among hosts and turtles (a
    guide, not a score: every trial is scored by the evaluator): per container, moving
    it (all its traffic across racks, and its bytes if it sits where it started, M);
    per up host, switching it on."""

    move: list[float]
    switch_on: dict[int, float]

    @staticmethod
    def of(
        inst: Instance, weights: Weights, limits: Bounds, where: list[int], hosts: list[int]
    ) -> _Prices:
        (k_p, _k_d, k_c, k_m), _ = limits.linear(weights)
        volume = [0.0] * len(inst.containers)
        for f in inst.flows:
            volume[f.a] += f.bytes_per_s
            volume[f.b] += f.bytes_per_s
        for u in inst.uniform:
            for m in u.members:
                volume[m] += u.bytes_per_s * (len(u.members) - 1)
        move = []
        for i, c in enumerate(inst.containers):
            stays = inst.current[i] is not None and inst.current[i] == where[i]
            move.append(
                k_c * inst.cross_rack_cost * volume[i] + (k_m * c.memory_bytes if stays else 0)
            )
        switch_on = {h: k_p * (inst.hosts[h].idle_w - inst.hosts[h].empty_w) for h in hosts}
        return _Prices(move, switch_on)


class _Room:
    """Free cores, devils and turtles per up host of a placement being changed."""

    def __init__(self, inst: Instance, where: list[int], hosts: list[int], prices: _Prices):
        self.inst, self.hosts, self.prices = inst, hosts, prices
        self.free = {h: inst.hosts[h].cores for h in hosts}
        self.devils_on: Counter[int] = Counter()  # devil containers per host
        self.cores_on: Counter[int] = Counter()  # devil cores per host
        self.turtles_on: dict[int, list[int]] = {h: [] for h in hosts}
        self.busy: set[int] = set()
        for i, h in enumerate(where):
            c = inst.containers[i]
            if h in self.free:
                self.free[h] -= c.cores
                if not c.devil:
                    self.turtles_on[h].append(i)
            self.busy.add(h)
            if c.devil:
                self.devils_on[h] += 1
                self.cores_on[h] += c.cores

    def contended(self, h: int, devils: int = 0, cores: int = 0) -> bool:
        tolerance = self.inst.hosts[h].devil_tolerance
        return is_contended(self.devils_on[h] + devils, self.cores_on[h] + cores, tolerance)

    def spot(self, d: int, here: int, racks: set[int]) -> tuple[int, list[int]] | None:
        """Where devil ``d`` goes calm, and the turtles that leave that host for ``here``
        to make room (cheapest to move first), or None: the host where switching it on,
        the turtles sent and leaving the job's racks cost least. Sending turtles back
        keeps both hosts' loads, and so P, as they were (a swap)."""
        inst, move = self.inst, self.prices.move
        need = inst.containers[d].cores
        # What ``here`` can take back once d has left: nothing if it is not up.
        room_here = self.free[here] + need if here in self.free else 0
        away = (inst.cross_rack_cost - inst.same_rack_cost) / max(inst.cross_rack_cost, 1e-300)
        best: tuple[float, int, list[int]] | None = None
        devils_on, cores_on, specs = self.devils_on, self.cores_on, inst.hosts
        for h in self.hosts:  # the hot loop: the contention rule's arguments read inline
            if h == here or is_contended(
                devils_on[h] + 1, cores_on[h] + need, specs[h].devil_tolerance
            ):
                continue
            sent: list[int] = []
            if self.free[h] < need:
                short = need - self.free[h]
                for t in sorted(
                    self.turtles_on[h], key=lambda t: move[t] / inst.containers[t].cores
                ):
                    if short <= 0:
                        break
                    sent.append(t)
                    short -= inst.containers[t].cores
                if short > 0 or sum(inst.containers[t].cores for t in sent) > room_here:
                    continue
            cost = sum(move[t] for t in sent)
            if inst.hosts[h].rack not in racks:
                cost += away * move[d]
            if h not in self.busy:
                cost += self.prices.switch_on[h]
            if best is None or cost < best[0]:
                best = (cost, h, sent)
                if cost == 0.0:
                    break
        return None if best is None else (best[1], best[2])

    def move_devil(self, d: int, here: int, h: int, sent: list[int], out: list[int]) -> None:
        """Devil ``d`` from ``here`` to ``h``, the ``sent`` turtles from ``h`` to ``here``."""
        cores = self.inst.containers[d].cores
        out[d] = h
        self.free[h] -= cores
        if here in self.free:
            self.free[here] += cores
        for t in sent:
            size = self.inst.containers[t].cores
            out[t] = here
            self.free[h] += size
            self.free[here] -= size
            self.turtles_on[h].remove(t)
            self.turtles_on[here].append(t)
        for at, sign in ((here, -1), (h, 1)):
            self.devils_on[at] += sign
            self.cores_on[at] += sign * cores
        self.busy.add(h)


def _calm(
    inst: Instance, where: list[int], job: int, devils: list[int], room: _Room, *, deadline: float
) -> list[int] | None:
    """``where`` with the job's contended devils moved to hosts they leave calm, or None
    when some devil finds no such host or the deadline passes."""
    moving = [d for d in devils if room.contended(where[d])]  # room counts ``where``
    if not moving:
        return None
    racks = {inst.hosts[where[i]].rack for i in inst.job_containers[job]}
    out = list(where)
    for d in moving:
        if time.monotonic() >= deadline:
            return None
        here = out[d]
        if not room.contended(here):
            continue  # calm now that others of the job left
        spot = room.spot(d, here, racks)
        if spot is None:
            return None
        room.move_devil(d, here, spot[0], spot[1], out)
    return out
