"""Move a whole job onto hosts of its own when that lowers F (issue 12).

The pool rounding packs the devils of lagging jobs densely on a few contended hosts and
seats their turtles beside calm devils elsewhere, as its patterns say; the patterns are
blind to jobs, so every devil-turtle flow of such a job crosses hosts. On the realistic
1,024-host snapshot (seed 1, weights 6,10,4) a ring of 64 containers sat with its 32
devils on two contended hosts and its 32 turtles on six others, and 242 hosts were
empty: the job alone on four of them costs two more hosts' switch-on watts and saves
nearly all of its slow-link traffic. Single moves and swaps (exchange.py) and the host
search's neighbourhoods of at most 32 containers (hostlns.py) cannot get there, as no
step of one container lowers F: the job gathers only when all of it moves at once.

So, job by job, most slow-link traffic first: take the job off, lay its containers in
region-growing order (locality.py, so rings and stencils keep their neighbours) on the
hosts this leaves empty (those it ran on alone, and the unused ones), rack by rack,
roomiest rack first and largest hosts first, and keep the move if F goes down. Three
layouts: dense (each host filled), for a job with devils calm (a new host before a
second devil container would make one contend: the job may stop lagging), and in place
(the places the job holds now on up hosts, filled in that order: P and D stay, only C
and M change; at 4,096 hosts, where power weighs most and new hosts do not pay, this one
moves). What a job runs on a drained host stays there: that host takes no other. F's change is
computed exactly, step by step, by exchange.State (P, D under the straggler rule, C, M),
and a layout that does not pay is stepped back.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from clavis.instance import Assignment, ContainerSpec, Instance
from clavis.placement import locality
from clavis.placement.exchange import GAIN, State
from clavis.placement.fathom import watts_per_core

MAX_JOBS = 5_000  # jobs tried per call at most, whatever the time limit


def _job_traffic(state: State) -> dict[int, float]:
    """Per job, the slow-link traffic it pays now (bytes/s x link cost)."""
    inst = state.inst
    out: dict[int, float] = defaultdict(float)
    for f in inst.flows:
        cost = state.cost(state.host_of[f.a], state.host_of[f.b])
        if cost:
            out[inst.containers[f.a].job] += f.bytes_per_s * cost
    for ui, u in enumerate(inst.uniform):
        job = inst.containers[u.members[0]].job
        # Every member pays the others by place; each pair is counted from both ends.
        paid = sum(state.paid(ui, m, state.host_of[m]) for m in u.members)
        out[job] += u.bytes_per_s * paid / 2
    return out


class _Room:
    """The up hosts nothing runs on, by rack, largest first."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.by_rack: dict[int, set[int]] = defaultdict(set)
        self.cores: Counter[int] = Counter()  # per rack, the cores of its empty hosts
        self.ranked: dict[int, list[int]] = {}  # per rack, its empty hosts in order
        for hi, h in enumerate(state.inst.hosts):
            if h.state == "up" and not state.on[hi]:
                self.by_rack[h.rack].add(hi)
                self.cores[h.rack] += h.cores

    def refresh(self, hosts: set[int]) -> None:
        for hi in hosts:
            h = self.state.inst.hosts[hi]
            if h.state != "up":
                continue
            empty = not self.state.on[hi]
            if empty != (hi in self.by_rack[h.rack]):
                self.ranked.pop(h.rack, None)
                self.cores[h.rack] += h.cores if empty else -h.cores
                (self.by_rack[h.rack].add if empty else self.by_rack[h.rack].discard)(hi)

    def _in_order(self, hosts: set[int]) -> list[int]:
        inst = self.state.inst
        return sorted(
            hosts, key=lambda hi: (-inst.hosts[hi].cores, watts_per_core(inst.hosts[hi]), hi)
        )

    def for_job(self, members: Sequence[int]) -> list[int]:
        """Hosts the job may take: the empty ones and those it runs on alone, rack by
        rack (most cores first), largest hosts first; racks only until they hold the
        job's cores and a host per container (no layout needs more)."""
        inst, state = self.state.inst, self.state
        mine = set(members)
        extra: dict[int, set[int]] = defaultdict(set)
        for hi in {state.host_of[m] for m in members}:
            if inst.hosts[hi].state == "up" and state.on[hi] <= mine:
                extra[inst.hosts[hi].rack].add(hi)
        cores = Counter(self.cores)
        for r, hs in extra.items():
            cores[r] += sum(inst.hosts[hi].cores for hi in hs)
        need = sum(inst.containers[ci].cores for ci in members)
        out: list[int] = []
        got = 0
        for r in sorted(cores, key=lambda r: (-cores[r], r)):
            if got >= need and len(out) >= len(members):
                break
            if r in extra:
                hosts = self._in_order(self.by_rack[r] | extra[r])
            else:
                if r not in self.ranked:
                    self.ranked[r] = self._in_order(self.by_rack[r])
                hosts = self.ranked[r]
            out += hosts
            got += cores[r]
        return out


@dataclass
class _Filling:
    """The host a layout is filling: its free cores and the devils laid on it."""

    host: int
    free: int
    devils: int = 0
    devil_cores: int = 0

    def fits(self, inst: Instance, c: ContainerSpec, *, calm: bool) -> bool:
        """Whether c fits and, with ``calm``, leaves the host calm."""
        if c.cores > self.free:
            return False
        if not (calm and c.devil and self.devils):
            return True
        return self.devil_cores + c.cores <= inst.hosts[self.host].devil_tolerance

    def add(self, c: ContainerSpec) -> None:
        self.free -= c.cores
        if c.devil:
            self.devils += 1
            self.devil_cores += c.cores


def _layout(
    inst: Instance, members: list[int], hosts: list[int], *, calm: bool
) -> list[tuple[int, int]] | None:
    """(container, host) for the members in the order given, filling the hosts in turn;
    with ``calm`` a host takes a second devil container only within its tolerance.
    None if they do not fit."""
    out: list[tuple[int, int]] = []
    turn = iter(hosts)
    now: _Filling | None = None
    for ci in members:
        c = inst.containers[ci]
        while now is None or not now.fits(inst, c, calm=calm):
            hi = next(turn, None)
            if hi is None:
                return None
            now = _Filling(hi, inst.hosts[hi].cores)
        now.add(c)
        out.append((ci, now.host))
    return out


def _footprint(state: State, job: int) -> list[int]:
    """The hosts job runs on, rack by rack (most of its cores first), its largest share
    first."""
    inst = state.inst
    cores: Counter[int] = Counter()
    for ci in inst.job_containers[job]:
        cores[state.host_of[ci]] += inst.containers[ci].cores
    per_rack: Counter[int] = Counter()
    for hi, n in cores.items():
        per_rack[inst.hosts[hi].rack] += n
    return sorted(
        cores, key=lambda hi: (-per_rack[inst.hosts[hi].rack], inst.hosts[hi].rack, -cores[hi], hi)
    )


def _in_place(state: State, members: list[int], footprint: list[int]) -> list[tuple[int, int]]:
    """The job's containers laid again, in the order given, on the places it holds now:
    each host keeps as many of the job's containers of each class and size as it has,
    so P and D stay as they are and only which container sits where changes. Hosts
    are filled in turn (_footprint), so a ring or a stencil grown by locality.order
    keeps its neighbours together where the job's first placement scattered them.
    ``footprint``: _footprint of the job."""
    inst = state.inst
    job = inst.containers[members[0]].job
    # A drained host keeps only its own residents: what the job runs there stays.
    hosts = [hi for hi in footprint if inst.hosts[hi].state == "up"]
    slots: dict[tuple[bool, int], list[int]] = defaultdict(list)  # kind -> a host per place
    for hi in hosts:
        for ci in sorted(state.on[hi]):
            c = inst.containers[ci]
            if c.job == job:
                slots[(c.devil, c.cores)].append(hi)
    taken: Counter[tuple[bool, int]] = Counter()
    out = []
    for ci in members:
        if inst.hosts[state.host_of[ci]].state != "up":
            continue
        kind = (inst.containers[ci].devil, inst.containers[ci].cores)
        out.append((ci, slots[kind][taken[kind]]))
        taken[kind] += 1
    return out


def _move(state: State, moves: list[tuple[int, int]]) -> tuple[float, list[tuple[int, int]]]:
    """Makes the moves; F's change and the moves that undo them, in order."""
    change, back = 0.0, []
    for ci, to in moves:
        frm = state.host_of[ci]
        if frm != to:
            change += state.step(ci, to)
            back.append((ci, frm))
    back.reverse()
    return change, back


def gather(
    inst: Instance,
    assignment: Assignment,
    *,
    k: tuple[float, float, float, float],
    deadline: float,
) -> Assignment:
    """Each talking job, most slow-link traffic first, moved whole onto hosts of its own
    when that lowers F (k: F's coefficients of P, D, C and M, Bounds.linear), until the
    deadline (time.monotonic) passes."""
    if k[2] <= 0 or (not inst.flows and not inst.uniform):
        return assignment
    state = State(inst, assignment, k)
    paid = _job_traffic(state)
    room = _Room(state)
    keys: dict[int, list[int]] = {}  # host cores -> locality.order
    for job in sorted((j for j in paid if paid[j] > 0), key=lambda j: -paid[j])[:MAX_JOBS]:
        if time.monotonic() >= deadline:
            break
        hosts = room.for_job(inst.job_containers[job])
        footprint = _footprint(state, job)
        # Regions the size of the first host a layout fills, or of the job's largest.
        size = max(inst.hosts[hi].cores for hi in hosts[:1] or footprint)
        if size not in keys:
            keys[size] = locality.order(inst, size)
        key = keys[size]
        members = sorted(inst.job_containers[job], key=lambda ci: key[ci])
        layouts: list[list[tuple[int, int]] | None] = [_in_place(state, members, footprint)]
        if hosts:
            layouts.append(_layout(inst, members, hosts, calm=False))
            if any(inst.containers[ci].devil for ci in members):
                layouts.append(_layout(inst, members, hosts, calm=True))
        best: tuple[float, list[tuple[int, int]]] | None = None
        for moves in layouts:
            if moves is None:
                continue
            change, back = _move(state, moves)
            _move(state, back)
            if change < -GAIN and (best is None or change < best[0]):
                best = (change, moves)
        if best is not None:
            touched = {state.host_of[ci] for ci in members}
            _move(state, best[1])
            room.refresh(touched | {hi for _ci, hi in best[1]})
    return tuple(state.host_of)
