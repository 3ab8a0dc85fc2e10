"""Talking sets whose flows form a tree, a ring or a 2-D or 3-D grid, and the most
container pairs any split of them into small places keeps together (issue 12, the C floor).

The generic cut bounds of lower.py (each container's heaviest neighbours, q - 1 flows,
Donath and Hoffman's eigenvalues) prove less than half of what a stencil cut into hosts
must send: a 16 x 16 five-point stencil of 8-core containers on 64-core hosts cuts at least
160 neighbour pairs, the eigenvalues prove 65. Halo exchanges are most of what an HPC
cluster's jobs send, and for these shapes the largest number of pairs a place of m
containers can hold is known, so the least cut follows by counting:

* a tree (a master and its workers): an m-container part of it is a forest, at most m - 1
  pairs inside;
* a ring: a part of it short of the whole ring is a set of paths, at most m - 1 pairs;
* a grid of neighbours (a 5-point stencil in two dimensions, a 7-point one in three, not
  periodic): it is part of the lattice, and m cells of the d-dimensional lattice share
  at most floor(d m - d m^((d-1)/d)) sides (lattice_most: Loomis and Whitney's
  inequality; in two dimensions exact, Harary and Harborth, "Extremal animals", 1976).

A split into places of at most s containers keeps at most the sum of that over its
places; the cut is every pair less those kept. Shapes are recognised from the pairs
alone (degrees, then coordinates read off the distances from the corners, then every
pair checked against the coordinates), so measured traffic gets the bound only when it
is such a shape, and anything else keeps the generic bounds.
"""

from __future__ import annotations

import functools
import itertools
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
    sides: tuple[int, ...] = ()  # a grid's cells along each axis (two or three)
    # Rings and grids: the nodes in an order whose runs are compact (round the ring; a
    # grid's cells in Morton order, runs of which are near-square or near-cubic blocks),
    # for laying the set out on hosts (relayout.py).
    order: tuple[int, ...] = field(default=(), compare=False)
    # A grid's node -> its cell, numbered along the first axis fastest (for band orders).
    cells: tuple[int, ...] = field(default=(), compare=False)

    def orders(self) -> list[tuple[int, ...]]:
        """Orders to lay the set out in: ``order``, and for a 2-D grid also bands a few
        cells wide along either axis, walked along it line by line in a snake. Morton
        runs are near-square only at powers of two: a run of 12 is an L, where a band 4
        cells wide deals 4 x 3 blocks (a 16 x 32 stencil on hosts of 12: 336 pairs cut
        in Morton order, 254 in bands, 245 at least)."""
        out = [self.order] if self.order else []
        if self.kind != "grid" or len(self.sides) != 2 or not self.cells:
            return out
        node_at = {cell: v for v, cell in enumerate(self.cells)}
        for axis in (0, 1):
            across, along = self.sides[axis], self.sides[1 - axis]
            for width in BAND_WIDTHS:
                if width >= across:
                    break
                out.append(tuple(node_at[c] for c in _band(axis, width, across, along, self.sides)))
        return out


# Band widths relayout.py tries (cells): runs of 4-64 cells dealt as near-square blocks.
BAND_WIDTHS = (2, 3, 4, 5, 6, 8)


def _band(axis: int, width: int, across: int, along: int, sides: tuple[int, ...]) -> list[int]:
    """The cells of a 2-D grid (numbered first axis fastest) in bands ``width`` wide
    across ``axis``: each band walked along the other axis one line of cells at a time,
    every other line and band backwards, so that within a band consecutive cells are
    neighbours."""
    out = []
    for b, start in enumerate(range(0, across, width)):
        lines = range(along) if b % 2 == 0 else range(along - 1, -1, -1)
        for k, line in enumerate(lines):
            step = range(start, min(start + width, across))
            for x in step if k % 2 == 0 else reversed(step):
                xy = (x, line) if axis == 0 else (line, x)
                out.append(xy[0] + sides[0] * xy[1])
    return out


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
    return _grid(n, adjacent, degrees, 2) or _grid(n, adjacent, degrees, 3)


def _around(adjacent: list[list[int]]) -> tuple[int, ...]:
    """A ring's nodes in the order met walking round it from node 0."""
    order, before, here = [0], -1, 0
    for _ in range(len(adjacent) - 1):
        here, before = next(u for u in adjacent[here] if u != before), here
        order.append(here)
    return tuple(order)


def _morton(cell: tuple[int, ...]) -> int:
    """The cell's place on the Z-order curve: its coordinates' bits interleaved."""
    key, d = 0, len(cell)
    for bit in range(max(x.bit_length() for x in cell)):
        for axis, x in enumerate(cell):
            key |= ((x >> bit) & 1) << (d * bit + d - 1 - axis)
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


def _grid(n: int, adjacent: list[list[int]], degrees: list[int], d: int) -> Shape | None:
    """A grid of d axes (2 or 3), every side at least 2 cells, whose pairs are all
    neighbours on the lattice, or None. Its 2^d corners are the nodes of degree d; from
    one corner O, d others end its axes, and a cell x is x_i = (|Ox| - |A_i x| + |O A_i|)/2
    along axis i (distances in the graph). Which corners end the axes is tried."""
    corners = [v for v in range(n) if degrees[v] == d]
    if len(corners) != 2**d or max(degrees) > 2 * d:
        return None
    far = {c: _distances(adjacent, c) for c in corners}
    origin = far[corners[0]]
    if min(origin) < 0:
        return None
    for axes in itertools.combinations(corners[1:], d):
        sides = tuple(origin[a] + 1 for a in axes)
        if math.prod(sides) != n:
            continue
        cells = _cells(n, adjacent, origin, [far[a] for a in axes], sides)
        if cells is not None:
            order = tuple(sorted(range(n), key=lambda v: _morton(cells[v])))
            flat = tuple(sum(x * math.prod(sides[:i]) for i, x in enumerate(c)) for c in cells)
            return Shape("grid", n, sides, order, flat)
    return None


def _cells(
    n: int,
    adjacent: list[list[int]],
    origin: list[int],
    ends: list[list[int]],
    sides: tuple[int, ...],
) -> list[tuple[int, ...]] | None:
    """Every node's cell for these axes, if they are distinct, in the box, and every
    pair joins lattice neighbours (then the set is part of the lattice, which is all the
    bound needs); None otherwise."""
    cells = []
    for v in range(n):
        cell = []
        for end, side in zip(ends, sides, strict=True):
            twice = origin[v] - end[v] + side - 1
            if twice % 2 or not 0 <= twice // 2 < side:
                return None
            cell.append(twice // 2)
        if sum(cell) != origin[v]:
            return None
        cells.append(tuple(cell))
    if len(set(cells)) != n:
        return None
    for v in range(n):
        for u in adjacent[v]:
            if sum(abs(x - y) for x, y in zip(cells[v], cells[u], strict=True)) != 1:
                return None
    return cells


def _cube_root_up(x: int) -> int:
    """The least j with j^3 >= x, for x >= 1, in integers."""
    j = max(1, int(float(x) ** (1 / 3)))
    while j**3 < x:
        j += 1
    while (j - 1) ** 3 >= x:
        j -= 1
    return j


def lattice_most(m: int, d: int) -> int:
    """Most pairs of neighbours among m cells of the d-dimensional lattice (d = 2, 3).

    Each line along an axis that meets the cells leaves them at two sides at least, so
    the sides leaving are at least twice the sum of the cells' shadows on the coordinate
    planes (lines); by Loomis and Whitney the product of those shadows is at least
    m^(d-1), so their sum is at least d m^((d-1)/d). The 2 d m sides of the cells are
    twice the pairs inside plus those leaving: at most d m - d m^((d-1)/d) pairs, an
    integer, so its floor. In two dimensions that is exact (Harary and Harborth, 1976),
    in three it is reached by cubes."""
    if m <= 0:
        return 0
    if d == 2:  # d m^(1/2) = sqrt(4 m) rounded up: the least j with j^2 >= 4m
        return 2 * m - (math.isqrt(4 * m - 1) + 1)
    return 3 * m - _cube_root_up(27 * m * m)  # 3 m^(2/3) = (27 m^2)^(1/3)


@functools.lru_cache(maxsize=256)
def _lattice_split(n: int, most: int, d: int) -> int:
    """Most pairs n cells keep when split into places of at most ``most`` cells: the
    best sum of lattice_most over the places (its steps are not in order, so full places
    are not always best), by dynamic programming over the cells placed."""
    inside = np.array([lattice_most(m, d) for m in range(most + 1)], dtype=np.int64)
    best = np.zeros(n + 1, dtype=np.int64)
    for t in range(1, n + 1):
        k = min(most, t)
        best[t] = int(np.max(best[t - k : t][::-1] + inside[1 : k + 1]))
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
    return _lattice_split(n, min(most, n), len(shape.sides))
