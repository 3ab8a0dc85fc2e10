"""Interchangeable containers and hosts: the thesis's "fundamentally different branches".

Thesis §5.5.2 branches only into hosts that differ in what matters. Here the same idea
is static: containers that no objective can tell apart form a *group* whose members are
placed as a count per host, and hosts that no objective can tell apart form a *type*
whose members are ordered so that only one of their permutations is searched.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from clavis.instance import Instance


@dataclass(frozen=True)
class Group:
    """Containers of one job that P, D and C treat alike; members largest memory first."""

    members: tuple[int, ...]
    job: int
    cores: int
    devil: bool

    @property
    def size(self) -> int:
        return len(self.members)


def _neighbours(inst: Instance) -> list[dict[int, float]]:
    out: list[dict[int, float]] = [{} for _ in inst.containers]
    for f in inst.flows:
        out[f.a][f.b] = f.bytes_per_s
        out[f.b][f.a] = f.bytes_per_s
    return out


def _is_uniform_inside(members: list[int], nbrs: list[dict[int, float]]) -> bool:
    """Every pair inside the group exchanges the same bytes/s (possibly zero)."""
    inside = set(members)
    rates = {w for a in members for b, w in nbrs[a].items() if b in inside}
    if len(rates) > 1:
        return False
    if not rates:
        return True
    want = len(members) - 1
    return all(sum(1 for b in nbrs[a] if b in inside) == want for a in members)


def container_groups(inst: Instance, aggregate: bool = True) -> list[Group]:
    """Partition containers into groups; singletons when ``aggregate`` is off.

    Two containers are interchangeable when they share job, class and cores, exchange
    identical bytes/s with every container outside their group, and the group's
    internal traffic is uniform. Swapping them then changes neither P, D nor C. Memory
    is no part of the key (measured memories always differ, so keying on it would leave
    real snapshots without groups): only M sees it, and only through which members stay
    on their current host. Given how many members of a group a host keeps, M is least
    when the ones that stay are the largest residents, so members are listed largest
    memory first and every decoder keeps members in that order (``stay_bytes``).
    """
    n = len(inst.containers)
    if not aggregate:
        gid = list(range(n))
    else:
        keys: dict[tuple[int, bool, int], int] = {}
        gid = []
        for c in inst.containers:
            gid.append(keys.setdefault((c.job, c.devil, c.cores), len(keys)))
        nbrs = _neighbours(inst)
        # Refine until stable: splitting a group turns inside neighbours into outside ones.
        for _ in range(n + 1):
            changed = False
            members: dict[int, list[int]] = defaultdict(list)
            for i, g in enumerate(gid):
                members[g].append(i)
            fresh: dict[tuple[object, ...], int] = {}
            new_gid = [0] * n
            for g, mem in members.items():
                if not _is_uniform_inside(mem, nbrs):
                    for i in mem:
                        new_gid[i] = fresh.setdefault(("single", i), len(fresh))
                    changed = changed or len(mem) > 1
                    continue
                for i in mem:
                    outside = tuple(sorted((b, w) for b, w in nbrs[i].items() if gid[b] != g))
                    new_gid[i] = fresh.setdefault((g, outside), len(fresh))
            changed = changed or len(fresh) != len(members)
            gid = new_gid
            if not changed:
                break
    grouped: dict[int, list[int]] = defaultdict(list)
    for i, g in enumerate(gid):
        grouped[g].append(i)
    groups = []
    for mem in sorted(grouped.values()):
        c = inst.containers[mem[0]]
        largest_first = sorted(mem, key=lambda m: (-inst.containers[m].memory_bytes, m))
        groups.append(Group(tuple(largest_first), c.job, c.cores, c.devil))
    return groups


def residents(inst: Instance, g: Group) -> dict[int, tuple[int, ...]]:
    """Current host -> memory of the group's members there, largest first."""
    out: dict[int, list[int]] = defaultdict(list)
    for m in g.members:  # largest first already
        h = inst.current[m]
        if h is not None:
            out[h].append(inst.containers[m].memory_bytes)
    return {h: tuple(mem) for h, mem in out.items()}


def stay_bytes(memories: tuple[int, ...], kept: int) -> int:
    """Bytes that stay when a host keeps ``kept`` of residents with ``memories`` (largest
    first): the largest ``kept`` of them, the most any choice of members can keep."""
    return sum(memories[: max(0, kept)])


def pair_rates(inst: Instance, groups: list[Group]) -> dict[tuple[int, int], float]:
    """Bytes/s between one member of group g1 and one of g2 (g1 <= g2), both ways added.

    Constant by construction of the groups; all-to-all traffic adds its rate to every
    pair of groups of its job, a group with itself included.
    """
    group_of = {m: gi for gi, g in enumerate(groups) for m in g.members}
    rates: dict[tuple[int, int], float] = {}
    for f in inst.flows:
        a, b = sorted((group_of[f.a], group_of[f.b]))
        rates[a, b] = f.bytes_per_s
    for u in inst.uniform:
        inside = sorted({group_of[m] for m in u.members})
        for i, a in enumerate(inside):
            for b in inside[i:]:
                if a != b or groups[a].size > 1:
                    rates[a, b] = rates.get((a, b), 0.0) + u.bytes_per_s
    return rates


def host_types(inst: Instance, groups: list[Group]) -> list[list[int]]:
    """Hosts that are interchangeable: same specification, rack and current residents
    (their groups and memories: members of one group differ in what moving them costs)."""
    group_of = {m: gi for gi, g in enumerate(groups) for m in g.members}
    here: list[list[tuple[int, int]]] = [[] for _ in inst.hosts]
    for ci, where in enumerate(inst.current):
        if where is not None:
            here[where].append((group_of[ci], inst.containers[ci].memory_bytes))
    types: dict[tuple[object, ...], list[int]] = defaultdict(list)
    for hi, h in enumerate(inst.hosts):
        key = (
            h.cores,
            h.domains,
            h.devil_tolerance,
            h.rack,
            h.idle_w,
            h.slope_w,
            h.empty_w,
            h.state,
            tuple(sorted(here[hi])),
        )
        types[key].append(hi)
    return list(types.values())
