"""Talking sets whose flows form a tree, a ring or a 2-D grid, and the most container
pairs any split of them into small places keeps together (issue 12, the C floor).

The generic cut bounds of lower.py (each container's heaviest neighbours, q - 1 flows,
Donath and Hoffman's eigenvalues) prove less than half of what a stencil cut into hosts
must send: a 16 x 16 five-point stencil of 8-core containers on 64-core hosts cuts at least
160 neighbour pairs, the eigenvalues prove 65. Halo exchanges are most of what an HPC
cluster's jobs send, and for these shapes the largest number of pairs a place of m
containers can hold is known exactly, so the least cut follows by counting:

* a tree (a master and its workers): an m-container part of it is a forest, at most m - 1
  pairs inside;
* a ring: a part of it short of the whole ring is a set of paths, at most m - 1 pairs;
* a rows x cols grid of neighbours (a 5-point stencil, not periodic): it is part of the
  square lattice, and m cells of the lattice touch along at most floor(2m - 2 sqrt(m))
  sides (Harary and Harborth, "Extremal animals", 1976).

A split into places of at most s containers keeps at most the sum of that over its
places; the cut is every pair less those kept. Shapes are recognised from the pairs
alone (degrees, then coordinates read off distances from two corners, then every pair
checked against the coordinates), so measured traffic gets the bound only when it is
exactly such a shape, and anything else keeps the generic bounds.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np


@dataclass(frozen=True)
class Shape:
    """What a connected set of n containers' neighbour pairs form."""

    kind: Literal["tree", "ring", "grid"]
    size: int  # containers
    rows: int = 0  # grid only
    cols: int = 0
    # Rings and grids: the nodes in an order whose runs are compact (around the ring; the
    # grid's cells in Morton order, runs of which are near-square blocks), for laying
    # the set out on hosts (relayout.py).
    order: tuple[int, ...] = field(default=(), compare=False)


def recognise(n: int, pairs: Sequence[tuple[int, int]]) -> Shape | None:
    """The shape of a connected graph on nodes 0..n-1 with these distinct pairs, or None."""
    if n < 3:
        return None
    if len(pairs) == n - 1:
        return Shape("tree", n)  # connected with n - 1 edges
    adjacent: list[list[int]] = [[] for _ in range(n)]
    for a, b in pairs:
        adjacent[a].append(b)
        adjacent[b].append(a)
    degrees = [len(nbrs) for nbrs in adjacent]
    if len(pairs) == n and max(degrees) == 2:
        return Shape("ring", n, order=_around(adjacent))
    return _grid(n, adjacent, degrees)


def _around(adjacent: list[list[int]]) -> tuple[int, ...]:
    """A ring's nodes in the order met walking round it from node 0."""
    order, before, here = [0], -1, 0
    for _ in range(len(adjacent) - 1):
        here, before = next(u for u in adjacent[here] if u != before), here
        order.append(here)
    return tuple(order)


def _morton(row: int, col: int) -> int:
    """The cell's place on the Z-order curve: row and column bits interleaved."""
    key = 0
    for bit in range(max(row.bit_length(), col.bit_length())):
        key |= ((row >> bit) & 1) << (2 * bit + 1) | ((col >> bit) & 1) << (2 * bit)
    return key


def _distances(adjacent: list[list[int]], start: int) -> list[int]:
    dist = [-1] * len(adjacent)
    dist[start] = 0
    queue = [start]
    for v in queue:  # grows while read: breadth first
        for u in adjacent[v]:
            if dist[u] < 0:
                dist[u] = dist[v] + 1
                queue.append(u)
    return dist


def _grid(n: int, adjacent: list[list[int]], degrees: list[int]) -> Shape | None:
    """A rows x cols grid (both at least 2) with its pairs exactly the grid's neighbours."""
    corners = [v for v in range(n) if degrees[v] == 2]
    if len(corners) != 4 or max(degrees) > 4:
        return None
    from_first = _distances(adjacent, corners[0])
    if min(from_first) < 0:
        return None
    # The nearest other corner ends the first corner's side: cols - 1 steps away.
    second = min(corners[1:], key=lambda c: from_first[c])
    cols = from_first[second] + 1
    if cols < 2 or n % cols:
        return None
    rows = n // cols
    from_second = _distances(adjacent, second)
    # Cell (r, c) is r + c from the first corner and r + (cols - 1 - c) from the second.
    coords = []
    for v in range(n):
        twice_row = from_first[v] + from_second[v] - (cols - 1)
        if twice_row < 0 or twice_row % 2:
            return None
        r = twice_row // 2
        coords.append((r, from_first[v] - r))
    # What the bound needs, checked: distinct cells, every pair a pair of lattice
    # neighbours (then the set is part of the square lattice, whatever else it is).
    if len(set(coords)) != n:
        return None
    for v in range(n):
        for u in adjacent[v]:
            if abs(coords[v][0] - coords[u][0]) + abs(coords[v][1] - coords[u][1]) != 1:
                return None
    order = tuple(sorted(range(n), key=lambda v: _morton(*coords[v])))
    return Shape("grid", n, rows, cols, order)


def _lattice_most(m: int) -> int:
    """Most sides m cells of the square lattice share (Harary and Harborth): 2m less
    ceil(2 sqrt(m)), the least j with j^2 >= 4m, in integers."""
    return 2 * m - (math.isqrt(4 * m - 1) + 1) if m > 0 else 0


@functools.lru_cache(maxsize=256)
def _lattice_split(n: int, most: int) -> int:
    """Most sides n cells share when split into places of at most ``most`` cells: the
    best sum of _lattice_most over the places (its steps are 1 or 2 and not in order, so
    full places are not always best), by dynamic programming over the cells placed."""
    sides = np.array([_lattice_most(m) for m in range(most + 1)], dtype=np.int64)
    best = np.zeros(n + 1, dtype=np.int64)
    for t in range(1, n + 1):
        k = min(most, t)
        best[t] = int(np.max(best[t - k : t][::-1] + sides[1 : k + 1]))
    return int(best[n])


def most_inside(shape: Shape, most: int) -> int:
    """The most pairs a split of the set into places of at most ``most`` containers keeps
    inside its places (an upper bound, exact for trees and rings)."""
    n = shape.size
    if most <= 0:
        return 0
    if most >= n and shape.kind == "ring":
        return n
    if shape.kind in ("tree", "ring"):
        return n - math.ceil(n / most)  # every place short of the whole set is a forest
    return _lattice_split(n, min(most, n))
