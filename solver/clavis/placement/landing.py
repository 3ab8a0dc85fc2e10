"""What a repack's moved residents send (issue 12): a container that leaves its host lands
on one host, and its flows to the residents that stay cross a link unless they share
that host.

The pool master's Stay rows (pool.Stay) bound the C between residents that both stay,
and a flow with one end moved counted nothing there: one move made all of a container's
flows free, as if it could land beside every neighbour at once. A moved container b
lands on one host h other than its own; each neighbour a that stays on h_a then costs
b's flow w_ab * L(h, h_a) (0 on h, the same-rack cost in h's rack, else cross-rack).
For any price lambda_a per neighbour,

    w_ab * L(h, h_a) * K_a >= w_ab * lambda_a * K_a - w_ab * (lambda_a - L(h, h_a))^+

(K_a = 1 if a stays), so with W = sum_a w_ab * lambda_a and ``best`` the largest saving
sum_a w_ab * (lambda_a - L(h, h_a))^+ over the hosts b may land on, b's flows to the
residents that stay cost at least sum_a w_ab * lambda_a * K_a - best when b moves. With
K_b = 1 that side is at most W - W = 0, so the row

    v_b >= sum_a w_ab * lambda_a * K_a - (W - best) * K_b - best,   v_b >= 0

holds in both cases, and v_b counts only flows with b moved and a staying: none that a
Stay row counts (both stay), and each such flow once (at its moved end). Two prices:
lambda = same-rack cost everywhere (best: the host with most of b's neighbours), and,
where crossing racks costs more, lambda = cross-rack cost (best: a rack's neighbours at
the difference plus its best host's at the same-rack cost).

The row's K_b term stands for sum_a w_ab * lambda_a * K_a * K_b, the flows that stay
because both ends do, bounded by K_b alone. Where the master has a Stay row for b's host
and a's (``shared``), that row's variable z already bounds the same flows from below, and
the exact sum over the pair of hosts is at most z / L(h_b, h_a): so its part of the K_b
term is replaced by lambda * z / L, one term per pair of hosts. A fractional K (every
resident of a host kept by a share t) then no longer lets the Stay row count the pair's
flows as kept by 2t - 1 while the mover row counts them as kept by t: both read z, and
the master pays t * L for the pair, as mixing "all stay" with "all move" does (1,024-host
repacks, the pool master alone: bound +0.0011 to +0.0018).

An all-to-all group's members on one host are alike, so they make one unit: its members
times the same row, less each member's own pair. The rows of a job's units on one host
are summed into one v: a row per container held twice as much on the 1,024-host repacks
(+0.0013 to +0.0022 of F), but its master did not settle in 60 s; summed, the bound rises
by 0.0006 to 0.0013 and the master settles in 5-13 s.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from clavis.instance import Instance

EPS = 1e-12
TINY = 1e-9  # coefficients below this share of a row's largest are dropped


@dataclass(frozen=True)
class Landing:
    """Mover rows on F's scale: per variable v its Stay job (index) and its most; per row
    its variable and its right-hand side's ``best``; per resident its (row, coefficient
    of K) pairs, rows numbered from 0 here (the caller shifts them); per row its (Stay
    row, coefficient of that row's z) pairs."""

    variables: tuple[tuple[int, float], ...]
    rows: tuple[tuple[int, float], ...]
    entries: dict[int, list[tuple[int, float]]]
    shared: tuple[tuple[tuple[int, float], ...], ...] = ()


# Per (job, lower host, higher host): the master's Stay row for that job's flows between
# the two hosts and its link cost on F's scale.
StayRows = dict[tuple[int, int, int], tuple[int, float]]


@dataclass
class _Builder:
    variables: list[tuple[int, float]]
    rows: list[tuple[int, float]]
    entries: dict[int, list[tuple[int, float]]]
    shared: list[tuple[tuple[int, float], ...]]


# One kind of mover: a container with its neighbours, or all-to-all members alike on one
# host with all the group's residents (each member's own entry aside).
Unit = tuple[tuple[int, ...], list[tuple[int, float]]]


def landing_rows(
    inst: Instance, index: dict[int, int], k_c: float, stay_rows: StayRows | None = None
) -> Landing:
    """The mover rows of the jobs in ``index`` (job: its Stay job index), C weighted by
    ``k_c``: per job and host its movers' rows summed (one v per row would hold more,
    but the master took ten times longer and did not settle in 60 s at 1,024 hosts).
    ``stay_rows``: the master's Stay rows, whose z the rows share (module docstring)."""
    out = _Builder([], [], defaultdict(list), [])
    cur = inst.current
    near: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for f in inst.flows:
        if inst.containers[f.a].job in index and cur[f.a] is not None and cur[f.b] is not None:
            near[f.a].append((f.b, f.bytes_per_s))
            near[f.b].append((f.a, f.bytes_per_s))
    units: dict[tuple[int, int], list[Unit]] = defaultdict(list)  # (job, host): its movers
    for b in sorted(near):
        host = cur[b]
        assert host is not None
        units[(index[inst.containers[b].job], host)].append(((b,), near[b]))
    for u in inst.uniform:
        job = index.get(inst.containers[u.members[0]].job)
        if job is None:
            continue
        on: dict[int, list[int]] = defaultdict(list)
        for m in u.members:
            if (h := cur[m]) is not None:
                on[h].append(m)
        everyone = [(m, u.bytes_per_s) for h in sorted(on) for m in on[h]]
        for h in sorted(on):
            units[(job, h)].append((tuple(on[h]), everyone))
    racks = [h.rack for h in inst.hosts]
    # per (Stay job, host): per other host, the Stay row between the two
    between: dict[tuple[int, int], dict[int, tuple[int, float]]] = defaultdict(dict)
    for (job, a, b), row in (stay_rows or {}).items():
        if job in index:
            between[index[job], a][b] = row
            between[index[job], b][a] = row
    for (k, host), here in sorted(units.items()):
        _add(inst, out, k, here, racks=racks, k_c=k_c, shared=between.get((k, host), {}))
    return Landing(tuple(out.variables), tuple(out.rows), dict(out.entries), tuple(out.shared))


def _add(
    inst: Instance,
    out: _Builder,
    job: int,
    units: list[Unit],
    *,
    racks: list[int],
    k_c: float,
    shared: dict[int, tuple[int, float]],
) -> None:
    """One variable for the movers of ``units`` and its rows, one per price, each the sum
    of its units' rows that can be above 0; ``racks``: each host's rack; ``shared``: per
    other host, the Stay row of the job's flows between it and the movers' host."""
    same, cross = k_c * inst.same_rack_cost, k_c * inst.cross_rack_cost
    cur = inst.current
    prices = [same] + ([cross] if cross > same else [])
    # per unit: its first mover's neighbours (all-to-all: the member itself aside)
    theirs = [[(a, w) for a, w in near if a != movers[0]] for movers, near in units]
    forms = []
    for price in prices:
        coef: dict[int, float] = defaultdict(float)
        rows: dict[int, float] = {}
        saving = most = 0.0
        for (movers, near), others in zip(units, theirs, strict=True):
            total = price * sum(w for _, w in others)
            best = _best_saving(inst, movers[0], others, racks=racks, price=price, same=same)
            if total - best <= EPS:
                continue  # never above 0: it would only weaken the sum
            n, own = len(movers), set(movers)
            for a, w in near:
                # every mover but a itself has a as a neighbour (n = 1: a is not b)
                coef[a] += (n - 1 if a in own else n) * w * price
            # the flows to hosts with a Stay row are bounded by its z, not by K_b
            apart = 0.0
            for a, w in others:
                if (h := cur[a]) in shared:
                    apart += w * price
                    row, link = shared[h]
                    rows[row] = price / link
            for b in movers:
                coef[b] -= total - apart - best
            saving += n * best
            most += n * (total - best)
        if coef:
            forms.append((coef, saving, most, rows))
    if not forms:
        return
    var = len(out.variables)
    out.variables.append((job, max(most for _, _, most, _ in forms)))
    for coef, saving, _most, rows in forms:
        # A member's terms can nearly cancel, and GLOP gives up on coefficients of
        # 1e-22 beside 1e-3: drop the tiny ones, a negative one's most (K = 1) moved to
        # the right-hand side, which keeps the row valid.
        tiny = TINY * max(abs(c) for c in coef.values())
        slack = sum(-c for c in coef.values() if -tiny <= c < 0)
        row = len(out.rows)
        out.rows.append((var, saving + slack))
        out.shared.append(tuple(sorted(rows.items())))
        for a, c in coef.items():
            if abs(c) > tiny:
                out.entries[a].append((row, c))


def _best_saving(
    inst: Instance,
    b: int,
    near: list[tuple[int, float]],
    *,
    racks: list[int],
    price: float,
    same: float,
) -> float:
    """The most sum_a w * (price - L(h, h_a))^+ over the hosts h that b may land on (any
    but its own): per host of neighbours, and per rack of neighbours for any host there;
    ``racks``: each host's rack."""
    cur = inst.current
    home = cur[b]
    by_host: dict[int, float] = defaultdict(float)
    for a, w in near:
        h = cur[a]
        assert h is not None
        by_host[h] += w
    if price <= same:  # only a neighbour's host saves: L is at least same off it
        return price * max((v for h, v in by_host.items() if h != home), default=0.0)
    by_rack: dict[int, float] = defaultdict(float)
    top: dict[int, float] = defaultdict(float)  # per rack: its most on one host (not home)
    for h, v in by_host.items():
        by_rack[racks[h]] += v
        if h != home:
            top[racks[h]] = max(top[racks[h]], v)
    return max((price - same) * v + same * top[r] for r, v in by_rack.items())
