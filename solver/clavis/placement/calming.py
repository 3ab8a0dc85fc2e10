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
    guide, not a score: every trial is scored by the evaluator): per container, its bytes
    if it sits where it started (M), and the C its flows add if it leaves its host for
    another in its rack (``leave_host``: its host-mates' flows then cross a host) or for
    another rack (``leave_rack``: they and its rack-mates' cross racks); per up host,
    switching it on. The C prices read where the neighbours are: priced as if all of a
    container's flows crossed racks, a turtle that talks to other racks only looked as dear
    to send back as one whose job-mates all share its host, and calming switched hosts on
    rather than swap (1,024-host repacks, side by side: seed 2 F 0.3550 -> 0.3512 at 60 s,
    0.3616 -> 0.3523 at 10 s; the others within 0.001)."""

    stays: list[float]
    leave_host: list[float]
    leave_rack: list[float]
    switch_on: dict[int, float]

    @staticmethod
    def of(
        inst: Instance, weights: Weights, limits: Bounds, where: list[int], hosts: list[int]
    ) -> _Prices:
        (k_p, _k_d, k_c, k_m), _ = limits.linear(weights)
        mates, rack_mates = _neighbours_near(inst, where)
        same, cross = inst.same_rack_cost, inst.cross_rack_cost
        stays = [
            k_m * c.memory_bytes if cur is not None and cur == h else 0.0
            for c, cur, h in zip(inst.containers, inst.current, where, strict=True)
        ]
        leave_host = [k_c * same * w for w in mates]
        leave_rack = [
            k_c * (cross * w + (cross - same) * r) for w, r in zip(mates, rack_mates, strict=True)
        ]
        switch_on = {h: k_p * (inst.hosts[h].idle_w - inst.hosts[h].empty_w) for h in hosts}
        return _Prices(stays, leave_host, leave_rack, switch_on)

    def sent(self, t: int, same_rack: bool) -> float:
        """Turtle ``t`` sent away from its host, to a host in its rack or not."""
        return self.stays[t] + (self.leave_host[t] if same_rack else self.leave_rack[t])


def _neighbours_near(inst: Instance, where: list[int]) -> tuple[list[float], list[float]]:
    """Per container, the bytes/s it sends to containers on its host, and to containers on
    other hosts of its rack."""
    rack = [h.rack for h in inst.hosts]
    mates = [0.0] * len(inst.containers)
    rack_mates = [0.0] * len(inst.containers)
    for f in inst.flows:
        ha, hb = where[f.a], where[f.b]
        near = mates if ha == hb else rack_mates if rack[ha] == rack[hb] else None
        if near is not None:
            near[f.a] += f.bytes_per_s
            near[f.b] += f.bytes_per_s
    for u in inst.uniform:
        on_host = Counter(where[m] for m in u.members)
        on_rack = Counter(rack[where[m]] for m in u.members)
        for m in u.members:
            h = where[m]
            mates[m] += u.bytes_per_s * (on_host[h] - 1)
            rack_mates[m] += u.bytes_per_s * (on_rack[rack[h]] - on_host[h])
    return mates, rack_mates


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
        inst, prices = self.inst, self.prices
        need = inst.containers[d].cores
        # What ``here`` can take back once d has left: nothing if it is not up.
        room_here = self.free[here] + need if here in self.free else 0
        # d away from the job's racks: what leaving its own rack adds to leaving its host
        away = prices.leave_rack[d] - prices.leave_host[d]
        here_rack = inst.hosts[here].rack
        best: tuple[float, int, list[int]] | None = None
        devils_on, cores_on, specs = self.devils_on, self.cores_on, inst.hosts
        for h in self.hosts:  # the hot loop: the contention rule's arguments read inline
            if h == here or is_contended(
                devils_on[h] + 1, cores_on[h] + need, specs[h].devil_tolerance
            ):
                continue
            sent: list[int] = []
            in_rack = specs[h].rack == here_rack
            if self.free[h] < need:
                short = need - self.free[h]
                for t in sorted(
                    self.turtles_on[h],
                    key=lambda t: prices.sent(t, in_rack) / inst.containers[t].cores,
                ):
                    if short <= 0:
                        break
                    sent.append(t)
                    short -= inst.containers[t].cores
                if short > 0 or sum(inst.containers[t].cores for t in sent) > room_here:
                    continue
            cost = sum(prices.sent(t, in_rack) for t in sent)
            if specs[h].rack not in racks:
                cost += away
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
