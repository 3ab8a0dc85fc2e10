"""Swap what two alike hosts run to bring talking containers into one rack (issue 12).

Two up hosts with the same cores, tolerance and power model are interchangeable for P and
D: exchanging their whole contents changes only C (the contents change racks) and M. The
pool rounding (pool.py) fixes what each host runs but knows nothing of racks, so its
placements pay slow-link traffic a rack-aware exchange of contents removes at no cost in
power or contention. For a content A on host a, W_A[r] is its traffic with containers in
rack r on other hosts; A costs cross_rack * total - (cross_rack - same_rack) * W_A[rack],
so moving A from rack ra to rb and B back changes C by
(cross - same) * (W_A[ra] - W_A[rb] + W_B[rb] - W_B[ra] + 2 * w_AB), where w_AB, the
traffic between A and B, stays between two hosts of those two racks.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict

from clavis.instance import Assignment, Instance

MAX_PASSES = 20  # sweeps over the busy hosts at most, whatever the time limit
RACKS_TRIED = 3  # racks a content is offered per sweep: those it talks to most


class _State:
    def __init__(self, inst: Instance, assignment: Assignment) -> None:
        self.inst = inst
        self.host_of = list(assignment)
        self.on: dict[int, list[int]] = defaultdict(list)
        for ci, hi in enumerate(assignment):
            self.on[hi].append(ci)
        self.partners: list[list[tuple[int, float]]] = [[] for _ in inst.containers]
        for f in inst.flows:
            self.partners[f.a].append((f.b, f.bytes_per_s))
            self.partners[f.b].append((f.a, f.bytes_per_s))
        self.uniform_of: list[list[int]] = [[] for _ in inst.containers]
        self.per_rack: list[Counter[int]] = []  # per uniform entry: members per rack
        for ui, u in enumerate(inst.uniform):
            for m in u.members:
                self.uniform_of[m].append(ui)
            self.per_rack.append(Counter(inst.hosts[assignment[m]].rack for m in u.members))

    def rack(self, hi: int) -> int:
        return self.inst.hosts[hi].rack

    def weights(self, hi: int) -> defaultdict[int, float]:
        """Traffic of host hi's content with other hosts, by their rack."""
        w: defaultdict[int, float] = defaultdict(float)
        mine = self.on[hi]
        here: Counter[int] = Counter()
        for ci in mine:
            for d, b in self.partners[ci]:
                hd = self.host_of[d]
                if hd != hi:
                    w[self.rack(hd)] += b
            for ui in self.uniform_of[ci]:
                here[ui] += 1
        own = self.rack(hi)
        for ui, n in here.items():
            b = self.inst.uniform[ui].bytes_per_s
            for r, k in self.per_rack[ui].items():
                others = k - (n if r == own else 0)
                if others:
                    w[r] += b * n * others
        return w

    def between(self, a: int, b: int) -> float:
        """Traffic between the contents of hosts a and b."""
        total = 0.0
        on_b = set(self.on[b])
        count_b: Counter[int] = Counter()
        for ci in self.on[b]:
            for ui in self.uniform_of[ci]:
                count_b[ui] += 1
        for ci in self.on[a]:
            for d, w in self.partners[ci]:
                if d in on_b:
                    total += w
            for ui in self.uniform_of[ci]:
                total += self.inst.uniform[ui].bytes_per_s * count_b[ui]
        return total

    def moved_bytes(self, contents: list[int], frm: int, to: int) -> float:
        """Change of M when containers leave host frm for host to."""
        change = 0.0
        for ci in contents:
            home = self.inst.current[ci]
            if home == frm:
                change += self.inst.containers[ci].memory_bytes
            elif home == to:
                change -= self.inst.containers[ci].memory_bytes
        return change

    def swap(self, a: int, b: int) -> None:
        ra, rb = self.rack(a), self.rack(b)
        for ci in self.on[a]:
            self.host_of[ci] = b
            for ui in self.uniform_of[ci]:
                self.per_rack[ui][ra] -= 1
                self.per_rack[ui][rb] += 1
        for ci in self.on[b]:
            self.host_of[ci] = a
            for ui in self.uniform_of[ci]:
                self.per_rack[ui][rb] -= 1
                self.per_rack[ui][ra] += 1
        self.on[a], self.on[b] = self.on[b], self.on[a]


def _kind(inst: Instance, hi: int) -> tuple[int, int, float, float, float] | None:
    h = inst.hosts[hi]
    if h.state != "up":
        return None
    return (h.cores, h.devil_tolerance, h.idle_w, h.slope_w, h.empty_w)


def regroup(
    inst: Instance,
    assignment: Assignment,
    *,
    k_c: float,
    k_m: float,
    deadline: float,
) -> Assignment:
    """Exchanges of whole contents between alike hosts while one lowers k_c*C + k_m*M
    (the rest of F cannot change), best exchange per host and rack tried first."""
    if k_c <= 0 or (not inst.flows and not inst.uniform):
        return assignment
    state = _State(inst, assignment)
    step = inst.cross_rack_cost - inst.same_rack_cost
    if step <= 0:
        return assignment
    alike: dict[tuple[tuple[int, int, float, float, float], int], list[int]] = defaultdict(list)
    for hi in range(len(inst.hosts)):
        kind = _kind(inst, hi)
        if kind is not None:
            alike[(kind, inst.hosts[hi].rack)].append(hi)
    for _ in range(MAX_PASSES):
        improved = False
        for a in sorted(state.on):
            if time.monotonic() >= deadline:
                return tuple(state.host_of)
            kind = _kind(inst, a)
            if kind is None or not state.on[a]:
                continue
            wa = state.weights(a)
            ra = state.rack(a)
            best, pick = -1e-9, None
            for rb in sorted(wa, key=lambda r: -wa[r])[:RACKS_TRIED]:
                if rb == ra or wa[rb] <= wa[ra]:
                    continue
                for b in alike[(kind, rb)]:
                    wb = state.weights(b) if state.on[b] else defaultdict(float)
                    gain = (
                        step * k_c * (wa[rb] - wa[ra] + wb[ra] - wb[rb] - 2 * state.between(a, b))
                    )
                    gain -= k_m * (
                        state.moved_bytes(state.on[a], a, b) + state.moved_bytes(state.on[b], b, a)
                    )
                    if gain > best:
                        best, pick = gain, b
            if pick is not None:
                state.swap(a, pick)
                improved = True
        if not improved:
            break
    return tuple(state.host_of)
