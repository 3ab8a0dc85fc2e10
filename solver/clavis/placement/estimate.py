"""How large a per-host CP-SAT model will be, known before building it (issue 12).

Building the per-host model in Python costs tens of microseconds per variable, and its
size grows with (container groups talking to each other) x hosts: on 1,024 hosts with
memory-distinct containers it took minutes and gigabytes while the time limit was 10 s.
Counting what the build would create is cheap (no model, no pair table), so a solve can
skip a turn that cannot be built in its time or memory and say so at once.

The per-unit costs were measured on this project's 2-core development machine (Table
5.3-like instances with memory-distinct containers, 256 and 1,024 hosts, figures below);
they are rough on purpose and err on the slow side.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from clavis.instance import Instance
from clavis.placement.symmetry import Group

# Seconds per unit of model (a variable with the constraint terms it appears in):
# building it and completing the hint (a propagation-only solve of a copy). Measured
# (memory-distinct Table 5.3 instances, 2 workers): symmetric model 281k units in 7.8 s
# + 4.8 s of hint at 256 hosts (45 us); plain model 178k units in 3.3 s at 256 hosts and
# 2.9M units in 39 s + 20 s at 1,024 hosts (19-20 us).
SYMMETRIC_SECONDS_PER_UNIT = 50e-6
PLAIN_SECONDS_PER_UNIT = 22e-6
# Peak RSS per unit: the Python objects, the proto and CP-SAT's copy while presolving
# (measured 550 B after building, 1,206 MiB peak for 2.9M plain units; rounded up).
BYTES_PER_UNIT = 1_000


@dataclass(frozen=True)
class ModelSize:
    """Units of a model and what building and loading them costs."""

    units: int
    seconds_per_unit: float

    @property
    def seconds(self) -> float:
        return self.units * self.seconds_per_unit

    @property
    def bytes(self) -> int:
        return self.units * BYTES_PER_UNIT


def _usable(inst: Instance) -> list[int]:
    """Cores of every host that can take containers (up, or drained with residents)."""
    residents = {h for h in inst.current if h is not None}
    return [
        h.cores
        for hi, h in enumerate(inst.hosts)
        if h.state == "up" or (h.state == "drain" and hi in residents)
    ]


def _fitting(cores: list[int], need: int) -> int:
    return sum(1 for c in cores if c >= need)


def per_host_size(inst: Instance, groups: list[Group]) -> ModelSize:
    """Units of cpsat.build_model(symmetric=True) for these groups."""
    usable = _usable(inst)
    fit = {c: _fitting(usable, c) for c in {g.cores for g in groups}}
    racks = len({h.rack for h in inst.hosts})
    group_of = {m: gi for gi, g in enumerate(groups) for m in g.members}
    # Pairs of groups that exchange traffic (symmetry.pair_rates without its table).
    pairs: set[tuple[int, int]] = set()
    for f in inst.flows:
        a, b = group_of[f.a], group_of[f.b]
        pairs.add((min(a, b), max(a, b)))
    units = sum(fit[g.cores] for g in groups) * 2  # y and its power/capacity terms
    products = 0
    for u in inst.uniform:
        inside = Counter(group_of[m] for m in u.members)
        k = len(inside)
        many = sum(1 for n in inside.values() if n > 1)
        # Every pair of distinct groups of the job, and each multi-member group with itself.
        fits = sorted(fit[groups[gi].cores] for gi in inside)
        # sum over pairs of min(fit1, fit2): each group is the smaller one for those after it
        products += sum(f * (k - 1 - i) for i, f in enumerate(fits))
        products += sum(fit[groups[gi].cores] for gi, n in inside.items() if n > 1)
        products += (k * (k - 1) // 2 + many) * (racks if racks > 1 else 0)
    for a, b in pairs:
        products += min(fit[groups[a].cores], fit[groups[b].cores])
        products += racks if racks > 1 else 0
    return ModelSize(units + 2 * products, SYMMETRIC_SECONDS_PER_UNIT)


def plain_size(inst: Instance) -> ModelSize:
    """Units of cpsat.build_model(symmetric=False): a boolean per (container, host) in four
    constraints (placed once, capacity, host index, rack index) and two per flow."""
    usable = _usable(inst)
    fit = {c: _fitting(usable, c) for c in {c.cores for c in inst.containers}}
    cells = sum(fit[c.cores] for c in inst.containers)
    flows = len(inst.flows) + sum(u.pairs for u in inst.uniform)
    return ModelSize(4 * cells + 4 * flows, PLAIN_SECONDS_PER_UNIT)
