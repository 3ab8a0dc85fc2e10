"""Moves and swaps of single containers towards the hosts they talk to (issue 12).

The pool rounding fills its host templates job by job but takes whatever slot is free,
the greedy schedules fill hosts in order, and a repack starts from a placement made by
arrival: jobs end up spread. On the realistic 1,024-host snapshot (seed 1, 10 s) the
lagging jobs sent 15 times their share of the C floor across hosts and the turtle-only
jobs 12 times: a job that lags anyway may have its devils and turtles together, and a
turtle may sit wherever its job is.

This is a Kernighan-Lin style local search with F's change computed exactly and locally
(a test checks every step against the evaluator, objectives.py):

* C: moving container c from host h to h2 changes the cost of its own flows only, and
  for an all-to-all entry (every pair of members pays bytes_per_s times the link cost)
  it depends on the other members' count per host and per rack.
* M: the bytes of a container that leaves, or comes back to, its current host.
* P: the two hosts' busy cores (and whether either is empty).
* D: the devils per host say which hosts are contended; a job lags while any of its
  devils is on a contended host, so the search keeps per job that count.

A swap is two moves made one after the other, so a flow between the two is counted
right. A container is offered its partners' hosts and, when its traffic goes mostly to
another rack, a few hosts of that rack; where none of its size is there, it may swap
with a few smaller ones (a bundle). A step is kept only if it lowers F.
"""

from __future__ import annotations

import heapq
import time
from collections import Counter, defaultdict, deque

from clavis.instance import Assignment, Instance
from clavis.objectives import host_watts, is_contended

MAX_PASSES = 30  # sweeps over the talking containers at most, whatever the time limit
HOSTS_TRIED = 4  # hosts a container is offered per sweep: where its partners are most
# Hosts of the rack its traffic goes to most (not its own) it is also offered, where no
# partner sits: a calm stencil over five racks (1,024 hosts, seed 2) paid 8 times its
# host floor in rack crossings, its partners' hosts full of its own devils.
RACK_HOSTS_TRIED = 4
RACK_HOSTS_SCANNED = 32  # hosts of that rack looked at per offer at most
PARTNERS_TRIED = 6  # containers of its size on such a host it may swap with
GAIN = 1e-12  # least decrease of F worth a step
# Smaller containers a container may swap with at once where none of its size is there
# (an 8-core turtle for two 4-core ones): at most this many.
BUNDLE_MOST = 4


class State:
    """A placement with what F's change under a move needs: per host its load and
    devils, per job its devils on contended hosts, per all-to-all entry its members per
    host and rack."""

    def __init__(
        self, inst: Instance, assignment: Assignment, k: tuple[float, float, float, float]
    ) -> None:
        self.inst = inst
        self.k_p, self.k_d, self.k_c, self.k_m = k
        self.host_of = list(assignment)
        self.rack = [h.rack for h in inst.hosts]
        self.in_rack: defaultdict[int, list[int]] = defaultdict(list)
        for hi, h in enumerate(inst.hosts):
            if h.state == "up":  # a drained host takes back only its residents
                self.in_rack[h.rack].append(hi)
        self.turn = 0  # where the next rack offer starts, so offers vary between sweeps
        self.on: list[set[int]] = [set() for _ in inst.hosts]
        self.free = [h.cores for h in inst.hosts]
        self.devil_cores = [0] * len(inst.hosts)
        self.devils_on: list[set[int]] = [set() for _ in inst.hosts]
        self.job_devil_cores: defaultdict[int, int] = defaultdict(int)
        for ci, hi in enumerate(assignment):
            c = inst.containers[ci]
            self.on[hi].add(ci)
            self.free[hi] -= c.cores
            if c.devil:
                self.devils_on[hi].add(ci)
                self.devil_cores[hi] += c.cores
                self.job_devil_cores[c.job] += c.cores
        self.hot = [self._contended(hi) for hi in range(len(inst.hosts))]
        self.hot_devils: defaultdict[int, int] = defaultdict(int)  # per job
        for hi, devils in enumerate(self.devils_on):
            if self.hot[hi]:
                for ci in devils:
                    self.hot_devils[inst.containers[ci].job] += 1
        self.partners: list[list[tuple[int, float]]] = [[] for _ in inst.containers]
        for f in inst.flows:
            self.partners[f.a].append((f.b, f.bytes_per_s))
            self.partners[f.b].append((f.a, f.bytes_per_s))
        self.entries: list[list[int]] = [[] for _ in inst.containers]
        self.per_host: list[Counter[int]] = []
        self.per_rack: list[Counter[int]] = []
        for ui, u in enumerate(inst.uniform):
            for m in u.members:
                self.entries[m].append(ui)
            self.per_host.append(Counter(assignment[m] for m in u.members))
            self.per_rack.append(Counter(self.rack[assignment[m]] for m in u.members))

    def _contended(self, hi: int) -> bool:
        tolerance = self.inst.hosts[hi].devil_tolerance
        return is_contended(len(self.devils_on[hi]), self.devil_cores[hi], tolerance)

    def _watts(self, hi: int) -> float:
        return self._watts_at(hi, 0)

    def _watts_at(self, hi: int, more: int) -> float:
        """Host hi's watts with ``more`` cores busy than now."""
        h = self.inst.hosts[hi]
        return host_watts(h, h.cores - self.free[hi] + more)

    def cost(self, a: int, b: int) -> float:
        if a == b:
            return 0.0
        if self.rack[a] == self.rack[b]:
            return self.inst.same_rack_cost
        return self.inst.cross_rack_cost

    def traffic_change(self, ci: int, to: int) -> float:
        """Change of C if container ci alone moved to host ``to``."""
        frm = self.host_of[ci]
        host_of, rack = self.host_of, self.rack
        same, cross = self.inst.same_rack_cost, self.inst.cross_rack_cost
        r_frm, r_to = rack[frm], rack[to]
        change = 0.0
        for d, b in self.partners[ci]:  # cost() written out: this is the inner loop
            hd = host_of[d]
            rd = rack[hd]
            now = 0.0 if hd == frm else (same if rd == r_frm else cross)
            then = 0.0 if hd == to else (same if rd == r_to else cross)
            change += b * (then - now)
        for ui in self.entries[ci]:
            b = self.inst.uniform[ui].bytes_per_s
            change += b * (self.paid(ui, ci, to) - self.paid(ui, ci, frm))
        return change

    def paid(self, ui: int, ci: int, x: int) -> float:
        """What member ci of all-to-all entry ui pays per byte/s to the other members
        if it sits on host x (ci itself left out of the counts)."""
        frm = self.host_of[ci]
        on_host = self.per_host[ui][x] - (x == frm)
        rack = self.rack[x]
        in_rack = self.per_rack[ui][rack] - (rack == self.rack[frm])
        others = len(self.inst.uniform[ui].members) - 1
        same, cross = self.inst.same_rack_cost, self.inst.cross_rack_cost
        return same * (in_rack - on_host) + cross * (others - in_rack)

    def moved_change(self, ci: int, to: int) -> float:
        """Change of M if container ci moved to host ``to``."""
        home = self.inst.current[ci]
        if home is None:
            return 0.0
        frm = self.host_of[ci]
        return self.inst.containers[ci].memory_bytes * ((home != to) - (home != frm))

    def move_change(self, ci: int, to: int) -> float:
        """F's change if turtle ci alone moved to host ``to`` (nothing is moved)."""
        frm = self.host_of[ci]
        cores = self.inst.containers[ci].cores
        watts = self._watts_at(frm, -cores) + self._watts_at(to, cores)
        watts -= self._watts(frm) + self._watts(to)
        return (
            self.k_p * watts
            + self.k_c * self.traffic_change(ci, to)
            + self.k_m * self.moved_change(ci, to)
        )

    def tried(self, ci: int, to: int) -> float:
        """F's change if container ci moved to host ``to``, nothing moved: a turtle's
        (move_change) and, for a devil, what it does to which hosts contend and so to
        which jobs lag (lag_change). The same as step() then stepping back, without
        touching the state: consolidate.py asks it of every host with room."""
        if to == self.host_of[ci]:
            return 0.0
        change = self.move_change(ci, to)
        if self.inst.containers[ci].devil:
            change += self.lag_change(ci, to)
        return change

    def lag_change(self, ci: int, to: int) -> float:
        """Change of D if devil ci alone moved to host ``to`` (straggler rule: a job
        lags while any of its devils is on a contended host)."""
        inst = self.inst
        c = inst.containers[ci]
        frm = self.host_of[ci]
        hot_frm = is_contended(
            len(self.devils_on[frm]) - 1,
            self.devil_cores[frm] - c.cores,
            inst.hosts[frm].devil_tolerance,
        )
        hot_to = is_contended(
            len(self.devils_on[to]) + 1,
            self.devil_cores[to] + c.cores,
            inst.hosts[to].devil_tolerance,
        )
        hot_devils: defaultdict[int, int] = defaultdict(int)  # per job, its change
        hot_devils[c.job] += hot_to - self.hot[frm]
        for hi, hot in ((frm, hot_frm), (to, hot_to)):
            if hot != self.hot[hi]:
                for d in self.devils_on[hi]:
                    if d != ci:
                        hot_devils[inst.containers[d].job] += 1 if hot else -1
        change = 0.0
        for job, more in hot_devils.items():
            had = self.hot_devils.get(job, 0)
            was, now = had > 0, had + more > 0
            if now != was:
                change += self.k_d * self.job_devil_cores[job] * (1 if now else -1)
        return change

    def swap_change(self, a: int, b: int) -> float:
        """F's change if turtles a and b, of equal cores, swapped hosts (nothing is
        moved). Each one's traffic change counts the other where it is now, so their own
        flows come back: they stay between the same two hosts."""
        ha, hb = self.host_of[a], self.host_of[b]
        between = sum(w for d, w in self.partners[a] if d == b)
        shared = set(self.entries[a]).intersection(self.entries[b])
        between += sum(self.inst.uniform[ui].bytes_per_s for ui in shared)
        traffic = self.traffic_change(a, hb) + self.traffic_change(b, ha)
        traffic += 2 * between * self.cost(ha, hb)
        moved = self.moved_change(a, hb) + self.moved_change(b, ha)
        return self.k_c * traffic + self.k_m * moved

    def step(self, ci: int, to: int) -> float:
        """Moves container ci to host ``to`` and returns F's change."""
        frm = self.host_of[ci]
        if frm == to:
            return 0.0
        c = self.inst.containers[ci]
        change = self.k_c * self.traffic_change(ci, to) + self.k_m * self.moved_change(ci, to)
        watts = self._watts(frm) + self._watts(to)
        lagging = {}  # job: lagging before, for the jobs this may touch
        for hi in (frm, to):
            for d in self.devils_on[hi]:
                job = self.inst.containers[d].job
                lagging[job] = self.hot_devils[job] > 0
        lagging[c.job] = self.hot_devils[c.job] > 0
        self._place(ci, frm, to)
        change += self.k_p * (self._watts(frm) + self._watts(to) - watts)
        for job, was in lagging.items():
            now = self.hot_devils[job] > 0
            if now != was:
                change += self.k_d * self.job_devil_cores[job] * (1 if now else -1)
        return change

    def _place(self, ci: int, frm: int, to: int) -> None:
        c = self.inst.containers[ci]
        if c.devil and self.hot[frm]:
            self.hot_devils[c.job] -= 1
        self.on[frm].discard(ci)
        self.on[to].add(ci)
        self.free[frm] += c.cores
        self.free[to] -= c.cores
        self.host_of[ci] = to
        if c.devil:
            self.devils_on[frm].discard(ci)
            self.devils_on[to].add(ci)
            self.devil_cores[frm] -= c.cores
            self.devil_cores[to] += c.cores
            self._restate(frm, ci)
            self._restate(to, ci)
            if self.hot[to]:
                self.hot_devils[c.job] += 1
        for ui in self.entries[ci]:
            self.per_host[ui][frm] -= 1
            self.per_host[ui][to] += 1
            self.per_rack[ui][self.rack[frm]] -= 1
            self.per_rack[ui][self.rack[to]] += 1

    def _restate(self, hi: int, moved: int) -> None:
        """Host hi's contention after devil ``moved`` left or came, and the counts of its
        other devils' jobs (the moved one is counted by _place)."""
        hot = self._contended(hi)
        if hot == self.hot[hi]:
            return
        self.hot[hi] = hot
        for d in self.devils_on[hi]:
            if d != moved:
                self.hot_devils[self.inst.containers[d].job] += 1 if hot else -1

    def touched(self, ci: int, frm: int, back: tuple[int, ...]) -> set[int]:
        """Containers whose best step may have changed when ci left host frm (and those
        in ``back`` came there): they, their partners, and their all-to-all fellows on
        the two hosts."""
        moved = [ci, *back]
        hosts = {frm, self.host_of[ci]}
        out = set(moved)
        for m in moved:
            out.update(d for d, _b in self.partners[m])
            for ui in self.entries[m]:
                out.update(o for hi in hosts for o in self.on[hi] if ui in self.entries[o])
        return out

    def near(self, ci: int) -> list[int]:
        """Hosts other than its own where container ci's traffic goes most."""
        here = self.host_of[ci]
        weight: defaultdict[int, float] = defaultdict(float)
        for d, b in self.partners[ci]:
            weight[self.host_of[d]] += b
        for ui in self.entries[ci]:
            b = self.inst.uniform[ui].bytes_per_s
            for hi, n in self.per_host[ui].most_common(HOSTS_TRIED + 1):
                weight[hi] += b * n
        by_rack: defaultdict[int, float] = defaultdict(float)
        for hi, w in weight.items():
            by_rack[self.rack[hi]] += w
        weight.pop(here, None)
        ranked = heapq.nlargest(HOSTS_TRIED, weight.items(), key=lambda hw: hw[1])
        out = [hi for hi, w in ranked if w > 0]
        own = self.rack[here]
        far = max(by_rack, key=lambda r: (by_rack[r], -r), default=own)
        if far != own and by_rack[far] > by_rack.get(own, 0.0):
            out += self._rack_offers(ci, far, set(out))
        return out

    def _rack_offers(self, ci: int, rack: int, taken: set[int]) -> list[int]:
        """Up to RACK_HOSTS_TRIED hosts of ``rack`` with room for container ci or a
        container no larger, among RACK_HOSTS_SCANNED from a turning start."""
        cores = self.inst.containers[ci].cores
        hosts = self.in_rack[rack]
        out: list[int] = []
        self.turn += 1
        for k in range(min(len(hosts), RACK_HOSTS_SCANNED)):
            hi = hosts[(self.turn + k) % len(hosts)]
            if hi in taken:
                continue
            if self.free[hi] >= cores or any(
                self.inst.containers[o].cores <= cores for o in self.on[hi]
            ):
                out.append(hi)
                if len(out) == RACK_HOSTS_TRIED:
                    break
        return out


def exchange(
    inst: Instance,
    assignment: Assignment,
    *,
    k: tuple[float, float, float, float],
    deadline: float,
) -> Assignment:
    """Moves and swaps of containers towards the hosts they talk to, each lowering F
    (k: F's coefficients of P, D, C and M, Bounds.linear), until none is found or the
    deadline (time.monotonic) passes."""
    if k[2] <= 0 or (not inst.flows and not inst.uniform):
        return assignment
    state = State(inst, assignment, k)
    talking = [ci for ci in range(len(inst.containers)) if state.partners[ci] or state.entries[ci]]
    # Sweeps over every talking container, each followed by a worklist of the containers
    # next to a step, until a sweep finds none (a step elsewhere can also free the room
    # a container needs, which the worklist does not follow).
    for _ in range(MAX_PASSES):
        queue = deque(talking)
        queued = set(talking)
        steps = 0
        for _ in range(MAX_PASSES * len(talking)):
            if not queue:
                break
            if time.monotonic() >= deadline:
                return tuple(state.host_of)
            ci = queue.popleft()
            queued.discard(ci)
            frm = state.host_of[ci]
            moved = _best_step(state, ci)
            if moved is None:
                continue
            steps += 1
            for d in state.touched(ci, frm, moved):
                if d not in queued:
                    queued.add(d)
                    queue.append(d)
        if steps == 0:
            break
    return tuple(state.host_of)


def _best_step(state: State, ci: int) -> tuple[int, ...] | None:
    """Makes the best F-lowering step of container ci towards the hosts it talks to
    most: a move into free cores, a swap with a container of its size there, or with a
    few smaller ones (_bundle). The containers sent back to its host (none for a move),
    or None if it made no step."""
    inst = state.inst
    here = state.host_of[ci]
    cores = inst.containers[ci].cores
    best, pick = -GAIN, -1
    back: tuple[int, ...] = ()
    for there in state.near(ci):
        if not inst.allowed(ci, there):
            continue
        room = state.free[there] >= cores
        others = [
            o
            for o in state.on[there]
            if inst.containers[o].cores == cores and inst.allowed(o, here)
        ]
        tried: list[tuple[float, tuple[int, ...]]] = []
        if room or others:
            others = others[:PARTNERS_TRIED]
            if inst.containers[ci].devil:
                tried = _by_steps(state, ci, there, room, [(o,) for o in others])
            else:
                tried = _at_once(state, ci, there, room, others)
        elif bundle := _bundle(state, ci, there):
            tried = _by_steps(state, ci, there, False, [bundle])
        for total, sent in tried:
            if total < best:
                best, pick, back = total, there, sent
    if pick < 0:
        return None
    state.step(ci, pick)
    for other in back:
        state.step(other, here)
    return back


def _bundle(state: State, ci: int, there: int) -> tuple[int, ...]:
    """Containers on host ``there``, each smaller than ci, that make room for it there
    and fit where it is once it has left: silent ones first, then the largest, at most
    BUNDLE_MOST; () if there are none such."""
    inst = state.inst
    here = state.host_of[ci]
    cores = inst.containers[ci].cores
    need = cores - state.free[there]
    smaller = [
        o for o in state.on[there] if inst.containers[o].cores < cores and inst.allowed(o, here)
    ]
    smaller.sort(
        key=lambda o: (bool(state.partners[o] or state.entries[o]), -inst.containers[o].cores, o)
    )
    out: list[int] = []
    freed = 0
    for o in smaller[:BUNDLE_MOST]:
        if freed >= need:
            break
        out.append(o)
        freed += inst.containers[o].cores
    if freed < need or freed > state.free[here] + cores:
        return ()
    return tuple(out)


def _by_steps(
    state: State, ci: int, there: int, room: bool, sends: list[tuple[int, ...]]
) -> list[tuple[float, tuple[int, ...]]]:
    """F's change of moving container ci to host ``there`` (nothing sent back) and of
    swapping it with each of ``sends`` (one container of its size, or a bundle of
    smaller ones sent to its host), made and undone step by step (a devil may change
    which hosts are contended)."""
    here = state.host_of[ci]
    first = state.step(ci, there)
    out: list[tuple[float, tuple[int, ...]]] = [(first, ())] if room else []
    for sent in sends:
        total = first
        for other in sent:
            total += state.step(other, here)
        out.append((total, sent))
        for other in reversed(sent):
            state.step(other, there)
    state.step(ci, here)
    return out


def _at_once(
    state: State, ci: int, there: int, room: bool, others: list[int]
) -> list[tuple[float, tuple[int, ...]]]:
    """The same for a turtle, computed without moving anything: a turtle changes no
    host's contention, so D stays; a swap of equal cores leaves P as it was, and a turtle
    other than the two swapped sees the same."""
    out: list[tuple[float, tuple[int, ...]]] = []
    if room:
        out.append((state.move_change(ci, there), ()))
    for other in others:
        if state.inst.containers[other].devil:
            out += _by_steps(state, ci, there, False, [(other,)])
        else:
            out.append((state.swap_change(ci, other), (other,)))
    return out
