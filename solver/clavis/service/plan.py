"""From a target placement to an ordered migration plan (pure).

Steps run in waves; a wave holds at most ``parallelism`` steps and starts when the one
before it has finished. While a step runs, its container's cores count on both hosts
(CRIU holds it on the source until the restore commits), so a wave only uses space that
is free before it starts; after it, the sources' space is free for the next wave.
Within a wave, moves whose source host is the target of a waiting move go first: they
free the space others wait for. When every waiting move is blocked (a cycle of full
hosts), one container is staged on a host with room and moved on later; when none has
room, the remaining moves are deferred (reported, not planned): the containers stay.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass


@dataclass(frozen=True)
class Move:
    container: str
    source: str
    target: str
    cores: int
    memory_bytes: int


@dataclass(frozen=True)
class Step:
    index: int
    wave: int
    move: Move


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    deferred: tuple[Move, ...]

    @property
    def waves(self) -> int:
        return 1 + max((s.wave for s in self.steps), default=-1)


def moves_between(
    current: Mapping[str, str],
    target: Mapping[str, str],
    cores: Mapping[str, int],
    memory: Mapping[str, int],
) -> list[Move]:
    return [
        Move(c, current[c], target[c], cores[c], memory[c])
        for c in sorted(target)
        if c in current and current[c] != target[c]
    ]


def order(
    moves: list[Move],
    *,
    capacity: Mapping[str, int],
    current: Mapping[str, str],
    cores: Mapping[str, int],
    parallelism: int,
    staging_hosts: Set[str] = frozenset(),
) -> Plan:
    if parallelism < 1:
        raise ValueError(f"parallelism must be >= 1, got {parallelism}")
    free = dict(capacity)
    for c, h in current.items():
        free[h] = free.get(h, 0) - cores[c]
    if any(v < 0 for v in free.values()):
        raise ValueError("the current placement already overloads a host")
    waiting = list(moves)
    steps: list[Step] = []
    for _ in range(4 * len(moves) + 1):  # each round plans or stages at least one move
        if not waiting:
            break
        wanted = {m.target for m in waiting}
        waiting.sort(key=lambda m: (m.source not in wanted, -m.cores, m.container))
        room = dict(free)
        chosen: list[Move] = []
        for m in waiting:
            if len(chosen) == parallelism:
                break
            if room.get(m.target, 0) >= m.cores:
                chosen.append(m)
                room[m.target] -= m.cores
        if not chosen:
            staged = _stage(waiting[0], room, staging_hosts)
            if staged is None:
                break
            first, rest = staged
            waiting[0] = rest
            chosen = [first]
        wave = steps[-1].wave + 1 if steps else 0
        for m in chosen:
            if m in waiting:
                waiting.remove(m)
            free[m.target] -= m.cores
            free[m.source] += m.cores
            steps.append(Step(len(steps), wave, m))
    return Plan(tuple(steps), tuple(waiting))


def _stage(m: Move, room: Mapping[str, int], hosts: Set[str]) -> tuple[Move, Move] | None:
    spots = [
        h for h in sorted(hosts) if h not in (m.source, m.target) and room.get(h, 0) >= m.cores
    ]
    if not spots:
        return None
    via = max(spots, key=lambda h: room[h])
    return (
        Move(m.container, m.source, via, m.cores, m.memory_bytes),
        Move(m.container, via, m.target, m.cores, m.memory_bytes),
    )


def peak_loads(plan: Plan, capacity: Mapping[str, int], current: Mapping[str, str],
               cores: Mapping[str, int]) -> dict[str, int]:  # fmt: skip
    """Highest load each host reaches while the plan runs (a wave's containers counted on
    both ends); the solver-free check that no host ever goes over its cores."""
    load = dict.fromkeys(capacity, 0)
    for c, h in current.items():
        load[h] += cores[c]
    peak = dict(load)
    for w in range(plan.waves):
        in_wave = [s.move for s in plan.steps if s.wave == w]
        for m in in_wave:
            load[m.target] += m.cores
        for h, v in load.items():
            peak[h] = max(peak[h], v)
        for m in in_wave:
            load[m.source] -= m.cores
    return peak
