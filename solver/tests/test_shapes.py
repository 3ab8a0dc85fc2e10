"""Shapes of talking sets (placement/shapes.py): recognised only when they are what they
claim, and the pairs they say a split keeps are never fewer than any split keeps."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from test_lower import _graph_instance, _least_split

from clavis.placement import lower, shapes
from clavis.realistic import grid_shape, master_worker_edges, ring_edges, stencil_edges


def _pairs(directed: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return sorted({(min(a, b), max(a, b)) for a, b in directed})


def _shuffled(n: int, pairs: list[tuple[int, int]], rng: random.Random) -> list[tuple[int, int]]:
    label = list(range(n))
    rng.shuffle(label)
    out = [(label[a], label[b]) for a, b in pairs]
    rng.shuffle(out)
    return out


def _grid_pairs(*sides: int) -> list[tuple[int, int]]:
    """Neighbour pairs of a grid with these sides, cells numbered in row-major order."""
    cells = list(itertools.product(*(range(s) for s in sides)))
    at = {cell: k for k, cell in enumerate(cells)}
    out = []
    for cell, k in at.items():
        for axis in range(len(sides)):
            up = tuple(x + (i == axis) for i, x in enumerate(cell))
            if up in at:
                out.append((k, at[up]))
    return out


@pytest.mark.parametrize("n", [6, 12, 24, 32, 48, 64, 96, 128, 256, 512])
def test_the_generators_stencils_rings_and_masters_are_recognised_however_numbered(
    n: int,
) -> None:
    rng = random.Random(n)
    grid = shapes.recognise(n, _shuffled(n, _pairs(stencil_edges(n)), rng))
    assert grid is not None and grid.kind == "grid"
    assert sorted(grid.sides) == sorted(grid_shape(n))
    assert shapes.recognise(n, _shuffled(n, _pairs(ring_edges(n)), rng)) == shapes.Shape("ring", n)
    star = _shuffled(n, _pairs(master_worker_edges(n)), rng)
    assert shapes.recognise(n, star) == shapes.Shape("tree", n)


def test_what_is_not_a_tree_ring_or_grid_gets_no_shape() -> None:
    rng = random.Random(3)
    grid = _grid_pairs(6, 5)
    # A diagonal: no longer part of the square lattice.
    assert shapes.recognise(30, [*grid, (0, 6)]) is None
    # A torus (periodic stencil): four neighbours each, no corner.
    torus = {(min(a, b), max(a, b)) for a, b in grid}
    for r in range(6):
        torus.add((r * 5, r * 5 + 4))
    for c in range(5):
        torus.add((c, 25 + c))
    assert shapes.recognise(30, _shuffled(30, sorted(torus), rng)) is None
    # Every container talking to every other.
    assert shapes.recognise(6, list(itertools.combinations(range(6), 2))) is None
    # A ring with a chord.
    assert shapes.recognise(8, [*_pairs(ring_edges(8)), (0, 4)]) is None


def test_the_lattice_count_holds_for_every_set_of_cells_and_is_reached() -> None:
    # Every set of m cells of a 4 x 5 grid: the pairs inside never exceed
    # floor(2m - 2 sqrt(m)), and some set reaches it (Harary and Harborth).
    pairs = _grid_pairs(4, 5)
    for m in range(1, 11):
        most = max(
            sum(1 for a, b in pairs if a in cells and b in cells)
            for cells in map(set, itertools.combinations(range(20), m))
        )
        assert most == shapes.lattice_most(m, 2), m
        assert most == shapes.most_inside(shapes.Shape("grid", m, (1, m)), m), m


@pytest.mark.parametrize(
    ("kind", "n"), [("ring", 7), ("ring", 8), ("tree", 8), ("grid", 6), ("grid", 8), ("grid", 9)]
)
def test_the_shape_cut_never_exceeds_the_least_split(kind: str, n: int) -> None:
    # Weighted shapes of 1- and 2-core containers against every split into places.
    rng = random.Random(n)
    for _ in range(12):
        if kind == "ring":
            pairs = _pairs(ring_edges(n))
        elif kind == "tree":
            pairs = [(rng.randrange(k), k) for k in range(1, n)]
        else:
            pairs = _grid_pairs(*grid_shape(n))
        cores = [rng.choice([1, 1, 2]) for _ in range(n)]
        edges = {p: float(rng.randint(1, 9)) for p in pairs}
        (comp,) = lower._build_components(_graph_instance(cores, edges))
        assert comp.shape is not None and comp.shape.kind == kind
        cap = rng.randint(max(cores) + 1, max(cores) + 4)
        got = lower._shape_cut(comp, cap // min(cores))
        assert got <= _least_split(n, cores, edges, cap) + 1e-9, (kind, cores, edges, cap)


def test_a_stencil_cut_into_blocks_is_bound_exactly() -> None:
    # 16 x 16 stencil, 8 containers a place: 2 x 4 blocks cut 160 pairs, and no split
    # cuts fewer; the eigenvalues alone prove under half of that.
    (comp,) = lower._build_components(
        _graph_instance([8] * 256, dict.fromkeys(_grid_pairs(16, 16), 1.0))
    )
    assert comp.shape == shapes.Shape("grid", 256, (16, 16))
    assert lower._shape_cut(comp, 8) == pytest.approx(160.0)
    labels = [(k // 16 // 2, k % 16 // 4) for k in range(256)]
    blocks = sum(1 for a, b in _grid_pairs(16, 16) if labels[a] != labels[b])
    assert blocks == 160
    assert lower._spectral(comp, 64) < 80
    assert lower._cut_flows([comp], 64) == pytest.approx(160.0)


def test_a_ring_pays_a_pair_per_place_counting_both_directions() -> None:
    # Ten 1-core containers in a ring, each pair talking both ways (3 + 2 bytes/s):
    # places of 3 cut 4 pairs at least, 20 bytes/s; q - 1 flows alone said 3 x 2.
    n = 10
    edges: dict[tuple[int, int], float] = {}
    for k in range(n):
        edges[(k, (k + 1) % n)] = 3.0
        edges[((k + 1) % n, k)] = 2.0
    (comp,) = lower._build_components(_graph_instance([1] * n, edges))
    assert comp.shape == shapes.Shape("ring", n)
    assert lower._shape_cut(comp, 3) == pytest.approx(4 * 5.0)
    assert lower._cut_flows([comp], 3) == pytest.approx(20.0)
    assert math.isclose(_least_split(n, [1] * n, edges, 3), 20.0)


@pytest.mark.parametrize("sides", [(4, 3, 2), (2, 2, 5), (3, 3, 3), (8, 4, 4)])
def test_a_three_dimensional_grid_is_recognised_however_numbered(sides: tuple[int, ...]) -> None:
    n = math.prod(sides)
    shape = shapes.recognise(n, _shuffled(n, _grid_pairs(*sides), random.Random(n)))
    assert shape is not None and shape.kind == "grid"
    assert sorted(shape.sides) == sorted(sides)
    assert sorted(shape.order) == list(range(n))
    # One pair more, across a diagonal: not part of the lattice.
    assert shapes.recognise(n, [*_grid_pairs(*sides), (0, n - 1)]) is None


def test_the_three_dimensional_count_holds_for_every_set_of_cells() -> None:
    # Every set of up to 5 cells of a 3 x 3 x 3 cube keeps no more pairs than
    # lattice_most says; a 2 x 2 x 2 cube reaches it (12 pairs of 8 cells).
    pairs = _grid_pairs(3, 3, 3)
    for m in range(1, 6):
        most = max(
            sum(1 for a, b in pairs if a in cells and b in cells)
            for cells in map(set, itertools.combinations(range(27), m))
        )
        assert most <= shapes.lattice_most(m, 3), m
    assert shapes.lattice_most(8, 3) == 12
    assert shapes.lattice_most(27, 3) == 54  # the whole cube: 3 x 9 x 2


def test_a_cube_cut_into_small_cubes_is_bound_exactly() -> None:
    # 4 x 4 x 4 seven-point stencil, 8 containers a place: 2 x 2 x 2 cubes cut 48 of its
    # 144 pairs, and no split cuts fewer.
    (comp,) = lower._build_components(
        _graph_instance([1] * 64, dict.fromkeys(_grid_pairs(4, 4, 4), 1.0))
    )
    assert comp.shape == shapes.Shape("grid", 64, (4, 4, 4))
    assert lower._shape_cut(comp, 8) == pytest.approx(48.0)
    cube = [tuple(x // 2 for x in cell) for cell in itertools.product(range(4), repeat=3)]
    assert sum(1 for a, b in _grid_pairs(4, 4, 4) if cube[a] != cube[b]) == 48
