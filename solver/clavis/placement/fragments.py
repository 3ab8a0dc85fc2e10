"""Bring a job's stray containers into the rack it talks to, by trading places (issue 12).

A job that does not fit one rack beside the others ends up in a main part and a few
fragments: on the 60 s answer of the realistic 1,024-host snapshot (seed 2, weights
2,3,4) a 16 x 8 stencil of 8-core containers sat 81, 33, 7, 5 and 2 to a rack and sent
15% of its bytes across racks, at four times the cost of a same-rack link. No single
move or swap (exchange.py) gathers a fragment: a container that leaves it for the main
rack leaves its neighbours in the fragment behind, and pays for that as much as it
saves. regroup.py trades whole host contents, which a fragment sharing its hosts with
other jobs does not fill.

So a fragment trades places as a whole: each of its containers swaps with a container
of another job in the rack it talks to most, one of the same cores (every host keeps its
load: P stays) and of its class where the rack has one (then every host also keeps
whether it contends; D changes only through which jobs lag), silent ones first, else
the one whose own traffic loses least by the trade. F's change is summed exactly over
the swaps by exchange.State. Kept: the swaps with the job's rings and grids dealt anew
over its new places, or the best prefix of the swaps alone, whichever lowers F more.

On the 60 s answer of seed 4 (weights 6,5,7) F goes from 0.30138 to 0.30085 in 0.1 s;
seed 2's stencil stays as it was: its stray containers are devils, and a devil that
takes a turtle's place in the main rack would make the host contend.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict

from clavis.instance import Assignment, Instance
from clavis.placement.exchange import GAIN, State
from clavis.placement.lower import Component
from clavis.placement.relayout import best_layout, dealt_sets

FRAGMENT_MOST = 24  # containers of a job in one rack that still count as a fragment
PARTNERS_TRIED = 64  # containers of the target rack priced for each swap, at most
MAX_FRAGMENTS = 2_000  # fragments tried per call at most, whatever the time limit
PASSES = 4  # passes over the fragments at most


def gather_fragments(
    inst: Instance,
    assignment: Assignment,
    *,
    k: tuple[float, float, float, float],
    deadline: float,
) -> Assignment:
    """``assignment`` with job fragments traded into the racks they talk to, where that
    lowers F, until the deadline (an unchanged copy when nothing pays)."""
    if inst.cross_rack_cost <= inst.same_rack_cost or k[2] <= 0:
        return tuple(assignment)
    if len({h.rack for h in inst.hosts}) < 2:
        return tuple(assignment)
    st = State(inst, assignment, k)
    shaped: defaultdict[int, list[Component]] = defaultdict(list)
    for comp in dealt_sets(inst):
        shaped[comp.job].append(comp)
    tried = 0
    for _ in range(PASSES):  # a trade may leave or make fragments of other jobs
        before = list(st.host_of)
        for job, rack in _fragments(inst, st):
            if tried >= MAX_FRAGMENTS or time.monotonic() >= deadline:
                return tuple(st.host_of)
            tried += 1
            _trade(inst, st, job, rack, shaped.get(job, []))
        if st.host_of == before:
            break
    return tuple(st.host_of)


def _fragments(inst: Instance, st: State) -> list[tuple[int, int]]:
    """(job, rack) of every fragment: a rack holding at most FRAGMENT_MOST of a talking
    job's containers and fewer than another rack does; jobs with most cross-rack bytes
    first, a job's smallest fragments first."""
    members: defaultdict[int, list[int]] = defaultdict(list)
    for ci, c in enumerate(inst.containers):
        if st.partners[ci] or st.entries[ci]:
            members[c.job].append(ci)
    crossing: defaultdict[int, float] = defaultdict(float)
    for f in inst.flows:
        if st.rack[st.host_of[f.a]] != st.rack[st.host_of[f.b]]:
            crossing[inst.containers[f.a].job] += f.bytes_per_s
    for u in inst.uniform:
        racks = Counter(st.rack[st.host_of[m]] for m in u.members)
        n = len(u.members)
        pairs_in = sum(x * (x - 1) // 2 for x in racks.values())
        crossing[inst.containers[u.members[0]].job] += u.bytes_per_s * (n * (n - 1) // 2 - pairs_in)
    out = []
    for job in sorted(crossing, key=lambda j: (-crossing[j], j)):
        per_rack = Counter(st.rack[st.host_of[ci]] for ci in members[job])
        if len(per_rack) < 2:
            continue
        most = max(per_rack.values())
        small = [r for r, n in per_rack.items() if n <= FRAGMENT_MOST and n < most]
        out += [(job, r) for r in sorted(small, key=lambda r: (per_rack[r], r))]
    return out


def _toward(st: State, fragment: list[int], rack: int) -> int | None:
    """The rack other than ``rack`` the fragment's traffic goes to most (None: none)."""
    weight: defaultdict[int, float] = defaultdict(float)
    for ci in fragment:
        for d, b in st.partners[ci]:
            weight[st.rack[st.host_of[d]]] += b
        for ui in st.entries[ci]:
            b = st.inst.uniform[ui].bytes_per_s
            for r, n in st.per_rack[ui].items():
                weight[r] += b * n
    weight.pop(rack, None)
    best = max(weight.items(), key=lambda rw: (rw[1], -rw[0]), default=None)
    return None if best is None or best[1] <= 0 else best[0]


def _trade(inst: Instance, st: State, job: int, rack: int, shaped: list[Component]) -> None:
    """Swap the job's containers in ``rack`` with containers of other jobs of their
    cores (of their class where there are) in the rack they talk to most. Kept: all the
    swaps with the job's rings and grids dealt anew over its new places (relayout.py: a
    fragment moved in pays only once its neighbours are dealt beside it), or else the
    best prefix of the swaps alone, whichever lowers F more; nothing if neither does."""
    fragment = [ci for hi in st.in_rack[rack] for ci in st.on[hi] if inst.containers[ci].job == job]
    target = _toward(st, fragment, rack)
    if target is None:
        return

    def pull(ci: int) -> float:
        return sum(b for d, b in st.partners[ci] if st.rack[st.host_of[d]] == target)

    fragment.sort(key=lambda ci: -pull(ci))  # those that talk to the target most first
    pool: defaultdict[tuple[int, bool], list[int]] = defaultdict(list)
    for hi in st.in_rack[target]:
        for ci in st.on[hi]:
            c = inst.containers[ci]
            if c.job != job:
                pool[(c.cores, c.devil)].append(ci)
    for kind in pool.values():  # silent ones first: they lose nothing by the trade
        kind.sort(key=lambda ci: (bool(st.partners[ci] or st.entries[ci]), ci))
    steps: list[tuple[int, int]] = []  # (container, the host it left), in order
    total, best, best_at = 0.0, 0.0, 0
    for ci in fragment:
        c = inst.containers[ci]
        here = st.host_of[ci]
        # one of its own class, else of the other (a lone devil for a turtle leaves
        # both hosts calm; where it does not, F says so through D)
        alike, other = pool.get((c.cores, c.devil), []), pool.get((c.cores, not c.devil), [])
        offered = alike[:PARTNERS_TRIED] or other[:PARTNERS_TRIED]
        if not offered:
            continue
        partner = min(offered, key=lambda d: _leaving(st, d, here))
        (alike if alike else other).remove(partner)
        there = st.host_of[partner]
        total += st.step(ci, there)
        total += st.step(partner, here)
        steps += [(ci, here), (partner, there)]
        if total < best - GAIN:
            best, best_at = total, len(steps)
    for comp in shaped:
        host_of = list(st.host_of)
        best_layout(inst, comp, host_of, k_c=st.k_c, k_m=st.k_m)
        for ci in comp.members:
            if host_of[ci] != st.host_of[ci]:
                steps.append((ci, st.host_of[ci]))
                total += st.step(ci, host_of[ci])
    keep = len(steps) if total < best - GAIN else best_at
    for ci, frm in reversed(steps[keep:]):
        st.step(ci, frm)


def _leaving(st: State, ci: int, to: int) -> float:
    """What container ci's traffic and moved bytes cost more if it moved to host ``to``
    (weighted, as F counts them)."""
    return st.k_c * st.traffic_change(ci, to) + st.k_m * st.moved_change(ci, to)
