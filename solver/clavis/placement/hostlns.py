"""Large neighbourhood search over hosts: improve a placement a few hosts at a time.

The rack search (racklns.py) needs every pattern a host may run enumerated, which real
snapshots rule out: ring, stencil and master-worker jobs make every container its own
group (symmetry.py), and thousands of groups admit far more patterns than can be listed.
This search works on containers instead. Free a handful of hosts (one busy host, hosts
of its containers' traffic partners, more of its rack and an empty one), and seat the
containers they hold on them again with a small CP-SAT model whose objective is exactly
the change of F: every other container stays, so its traffic with a freed container is
a linear cost per host, its host's watts do not change, jobs already lagging elsewhere
stay charged, and M is linear per (container, host). The result is re-scored by the
evaluator (objectives.py) and kept only if F went down. The thesis's fathoming (§5.5.2:
build a schedule, keep it if it beats the incumbent) as local search, like racklns.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from ortools.sat.python import cp_model

from clavis.instance import Assignment, Instance
from clavis.objectives import Bounds, Weights, contended_hosts, score
from clavis.placement.hints import complete_hint

HOSTS = 8  # hosts one neighbourhood frees at most
FREED = 32  # containers one neighbourhood frees at most (beyond, CP-SAT rarely finishes)
SUB_SECONDS = 0.25  # most one neighbourhood's CP-SAT solve may take
MAX_TRIES = 100_000  # neighbourhoods per call at most, whatever the time limit


@dataclass(frozen=True)
class Coefficients:
    """F = k . (P, D, C, M) + offset (objectives.Bounds.linear)."""

    p: float
    d: float
    c: float
    m: float


def _partners(inst: Instance) -> list[list[tuple[int, float]]]:
    """Per container, its traffic partners and the bytes/s between them."""
    out: list[list[tuple[int, float]]] = [[] for _ in inst.containers]
    for f in inst.flows:
        out[f.a].append((f.b, f.bytes_per_s))
        out[f.b].append((f.a, f.bytes_per_s))
    return out


def _uniform_of(inst: Instance) -> list[list[int]]:
    """Per container, the all-to-all entries (inst.uniform) it belongs to."""
    out: list[list[int]] = [[] for _ in inst.containers]
    for ui, u in enumerate(inst.uniform):
        for m in u.members:
            out[m].append(ui)
    return out


@dataclass
class Context:
    inst: Instance
    k: Coefficients
    partners: list[list[tuple[int, float]]]
    uniform_of: list[list[int]]
    devil_cores: dict[int, int]  # job -> its devil cores
    rack_hosts: dict[int, list[int]]  # rack -> its hosts


def _neighbourhood(
    ctx: Context, where: list[int], on: list[list[int]], rng: random.Random
) -> list[int]:
    """Hosts to free, drawn one of two ways at random:

    * *talk*: a busy host, hosts of its containers' traffic partners, more of its rack
      and an empty one (traffic and contention);
    * *pack*: the least loaded of a few busy hosts and the fullest hosts of its rack that
      still have room, so that its containers may move in and the host switch off.
    """
    inst = ctx.inst
    busy = [h for h, cs in enumerate(on) if cs and inst.hosts[h].state != "down"]
    packing = rng.random() < 0.5

    def used(h: int) -> int:
        return sum(inst.containers[c].cores for c in on[h])

    if packing:
        seed = min(rng.sample(busy, min(8, len(busy))), key=lambda h: used(h) / inst.hosts[h].cores)
    else:
        seed = rng.choice(busy)
    picked = {seed}
    freed = len(on[seed])

    def add(h: int) -> None:
        nonlocal freed
        if h not in picked and freed + len(on[h]) <= FREED:
            picked.add(h)
            freed += len(on[h])

    rack = inst.hosts[seed].rack
    usable = [h for h in ctx.rack_hosts[rack] if inst.hosts[h].state == "up"]
    if packing:
        room = [h for h in usable if on[h] and used(h) < inst.hosts[h].cores]
        rng.shuffle(room)
        room.sort(key=lambda h: inst.hosts[h].cores - used(h))
        for h in room:
            if len(picked) >= HOSTS:
                break
            add(h)
        return sorted(picked)
    talk = [where[p] for c in on[seed] for p, _ in ctx.partners[c]]
    talk += [where[m] for c in on[seed] for ui in ctx.uniform_of[c] for m in _sample(inst, ui, rng)]
    rng.shuffle(talk)
    for h in talk:
        if len(picked) >= HOSTS // 2:
            break
        add(h)
    empty = [h for h in usable if not on[h]]
    if empty:
        add(rng.choice(empty))
    rng.shuffle(usable)
    for h in usable:
        if len(picked) >= HOSTS:
            break
        add(h)
    return sorted(picked)


def _sample(inst: Instance, ui: int, rng: random.Random) -> list[int]:
    members = inst.uniform[ui].members
    return rng.sample(members, min(4, len(members)))


def reseat_model(
    ctx: Context, *, where: list[int], on: list[list[int]], hosts: list[int]
) -> tuple[cp_model.CpModel, dict[tuple[int, int], cp_model.IntVar]]:
    """CP-SAT model seating the containers on ``hosts`` on those hosts again; its
    objective is F of the whole placement minus a constant (everything else fixed).
    ``x[c, h]``: container c runs on host h."""
    inst, k = ctx.inst, ctx.k
    freed = [c for h in hosts for c in on[h]]
    inside = set(freed)
    model = cp_model.CpModel()
    x: dict[tuple[int, int], cp_model.IntVar] = {}
    for c in freed:
        cores = inst.containers[c].cores
        for h in hosts:
            if inst.allowed(c, h) and cores <= inst.hosts[h].cores:
                x[c, h] = model.new_bool_var(f"x_{c}_{h}")
                model.add_hint(x[c, h], where[c] == h)
        # Every freed container is placed on one of the freed hosts.
        model.add_exactly_one(x[c, h] for h in hosts if (c, h) in x)
    terms: list[cp_model.LinearExprT | float] = []
    cx, cr = inst.cross_rack_cost, inst.same_rack_cost
    racks = sorted({inst.hosts[h].rack for h in hosts})
    for h in hosts:
        spec = inst.hosts[h]
        here = [(c, x[c, h]) for c in freed if (c, h) in x]
        load = sum(inst.containers[c].cores * v for c, v in here)
        # Cores capacity; a host with any load is powered on.
        used = model.new_bool_var(f"used_{h}")
        model.add(load <= spec.cores * used)
        terms.append(k.p * ((spec.idle_w - spec.empty_w) * used + spec.slope_w * load))
        for c, v in here:
            cur = inst.current[c]
            if cur is not None and cur != h:  # M: its memory moves
                terms.append(k.m * inst.containers[c].memory_bytes * v)
            # Traffic with partners that stay where they are: a cost per host.
            out = sum(
                w * inst.link_cost(h, where[p]) for p, w in ctx.partners[c] if p not in inside
            )
            for ui in ctx.uniform_of[c]:
                u = inst.uniform[ui]
                out += u.bytes_per_s * sum(
                    inst.link_cost(h, where[m]) for m in u.members if m not in inside
                )
            if out:
                terms.append(k.c * out * v)
    # Traffic between two freed containers: cross-rack unless they share a rack or host.
    pairs: dict[tuple[int, int], float] = defaultdict(float)
    for a in freed:
        for b, w in ctx.partners[a]:
            if b in inside and a < b:
                pairs[a, b] += w
        for ui in ctx.uniform_of[a]:
            u = inst.uniform[ui]
            for b in u.members:
                if b in inside and a < b:
                    pairs[a, b] += u.bytes_per_s
    for (a, b), w in pairs.items():
        same_host = [_both(model, x[a, h], x[b, h]) for h in hosts if (a, h) in x and (b, h) in x]
        same_rack = []
        for r in racks:
            ra = [x[a, h] for h in hosts if inst.hosts[h].rack == r and (a, h) in x]
            rb = [x[b, h] for h in hosts if inst.hosts[h].rack == r and (b, h) in x]
            if ra and rb:
                both = model.new_bool_var(f"sr_{a}_{b}_{r}")
                model.add(both <= sum(ra))
                model.add(both <= sum(rb))
                same_rack.append(both)
        worst = cx if len(inst.racks) > 1 else cr
        terms.append(k.c * w * (worst - (worst - cr) * sum(same_rack) - cr * sum(same_host)))
    terms.extend(_contention(ctx, model, x, freed, hosts=hosts, where=where))
    model.minimize(sum(terms, start=cp_model.LinearExpr.constant(0)))
    return model, x


def _reseat(
    ctx: Context,
    *,
    where: list[int],
    on: list[list[int]],
    hosts: list[int],
    seconds: float,
    seed: int,
) -> dict[int, int] | None:
    """New hosts for the containers on ``hosts`` (only those hosts), minimising F with
    everything else fixed; None when CP-SAT finds nothing in time."""
    if not any(on[h] for h in hosts):
        return None
    model, x = reseat_model(ctx, where=where, on=on, hosts=hosts)
    # A complete hint is CP-SAT's first solution at once; with the placement alone it
    # was left unrepaired, and answers worse than the hint came back (measured).
    complete_hint(model, x.values(), seconds)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, seconds)
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    # One neighbourhood changes F by 1e-4 or less on large clusters: CP-SAT's default
    # absolute gap (1e-4 on float objectives) called such models solved at their hint.
    solver.parameters.absolute_gap_limit = 0.0
    if solver.solve(model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return {c: h for (c, h), v in x.items() if solver.value(v)}


def _both(model: cp_model.CpModel, a: cp_model.IntVar, b: cp_model.IntVar) -> cp_model.IntVar:
    # Only an upper bound is needed: the objective rewards pairs that share a place.
    v = model.new_bool_var("")
    model.add_implication(v, a)
    model.add_implication(v, b)
    return v


def _contention(
    ctx: Context,
    model: cp_model.CpModel,
    x: dict[tuple[int, int], cp_model.IntVar],
    freed: list[int],
    *,
    hosts: list[int],
    where: list[int],
) -> list[cp_model.LinearExprT]:
    """Straggler charges of the devil jobs among the freed containers that no other host
    already makes lag (objectives.contention)."""
    inst = ctx.inst
    freed_hosts = set(hosts)
    hot_elsewhere = contended_hosts(inst, tuple(where)) - freed_hosts
    lagging_elsewhere = {
        inst.containers[c].job
        for c, h in enumerate(where)
        if h in hot_elsewhere and inst.containers[c].devil
    }
    devils = [c for c in freed if inst.containers[c].devil]
    jobs = {inst.containers[c].job for c in devils} - lagging_elsewhere
    lagging = {j: model.new_bool_var(f"lag_{j}") for j in sorted(jobs)}
    for h in hosts:
        here = [(c, x[c, h]) for c in devils if (c, h) in x]
        tol = inst.hosts[h].devil_tolerance
        most_cores = sum(inst.containers[c].cores for c, _ in here)
        if len(here) < 2 or most_cores <= tol:
            continue  # this host can never be contended
        many = model.new_bool_var(f"many_{h}")
        model.add(sum(v for _, v in here) <= 1 + (len(here) - 1) * many)
        over = model.new_bool_var(f"over_{h}")
        model.add(
            sum(inst.containers[c].cores * v for c, v in here) <= tol + (most_cores - tol) * over
        )
        hot = model.new_bool_var(f"hot_{h}")
        model.add_bool_or([many.Not(), over.Not(), hot])
        for c, v in here:
            j = inst.containers[c].job
            if j in lagging:
                model.add_bool_or([hot.Not(), v.Not(), lagging[j]])
    return [ctx.k.d * ctx.devil_cores[j] * b for j, b in lagging.items()]


def context(inst: Instance, weights: Weights, limits: Bounds) -> Context:
    (kp, kd, kc, km), _ = limits.linear(weights)
    devil_cores: dict[int, int] = defaultdict(int)
    for spec in inst.containers:
        if spec.devil:
            devil_cores[spec.job] += spec.cores
    k = Coefficients(kp, kd, kc, km)
    racks: dict[int, list[int]] = defaultdict(list)
    for hi, h in enumerate(inst.hosts):
        racks[h.rack].append(hi)
    return Context(inst, k, _partners(inst), _uniform_of(inst), dict(devil_cores), dict(racks))


def improve(
    inst: Instance,
    weights: Weights,
    limits: Bounds,
    assignment: Assignment,
    *,
    deadline: float,
    seed: int,
    found: Callable[[Assignment, float], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> Assignment | None:
    """A better placement than ``assignment`` by the evaluator's F, or None. Stops at
    ``deadline``, or earlier once ``stop`` says so (asked between neighbourhoods);
    ``found`` gets each improvement and its F (progress reports)."""
    ctx = context(inst, weights, limits)
    where = list(assignment)
    on: list[list[int]] = [[] for _ in inst.hosts]
    for c, h in enumerate(where):
        on[h].append(c)
    if not any(on):
        return None
    rng = random.Random(seed)
    best = score(inst, assignment, weights, limits).F
    improved = False
    for _ in range(MAX_TRIES):
        left = deadline - time.monotonic()
        if left <= 0.02 or (stop is not None and stop()):
            break
        hosts = _neighbourhood(ctx, where, on, rng)
        got = _reseat(
            ctx,
            where=where,
            on=on,
            hosts=hosts,
            seconds=min(SUB_SECONDS, left),
            seed=rng.randrange(2**31),
        )
        if got is None or all(where[c] == h for c, h in got.items()):
            continue
        trial = list(where)
        for c, h in got.items():
            trial[c] = h
        f = score(inst, tuple(trial), weights, limits).F
        if f < best - 1e-12 * max(1.0, best):
            best, where, improved = f, trial, True
            on = [[] for _ in inst.hosts]
            for c, h in enumerate(where):
                on[h].append(c)
            if found is not None:
                found(tuple(where), f)
    return tuple(where) if improved else None
