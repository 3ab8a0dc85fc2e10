"""Emptying lightly loaded hosts onto hosts already on (placement/consolidate.py)."""

from __future__ import annotations

import math
import random
import time

from test_gather import four_hosts, never_worse, realistic_starts

from clavis.instance import build_instance
from clavis.model import Placement, Workload
from clavis.objectives import Weights, bounds, evaluate, violations
from clavis.placement.consolidate import consolidate
from clavis.placement.exchange import State, exchange


def _turtles(cores: list[int]) -> Workload:
    return Workload.model_validate(
        {
            "schema_version": 1,
            "jobs": [
                {
                    "name": f"j{i}",
                    "containers": [
                        {"name": f"j{i}-c", "cores": n, "memory_bytes": 1 << 30,
                         "intensity_mpki": 1.0}
                    ],
                }
                for i, n in enumerate(cores)
            ],
        }
    )  # fmt: skip


def test_a_host_whose_containers_fit_elsewhere_is_emptied_and_powered_off() -> None:
    # Four 8-core hosts running 2, 2, 4 and 6 cores of lone turtles: no move of one
    # container lowers P until a host is empty, and the exchanges only follow traffic.
    # The 2-core hosts empty onto the 4- and 6-core ones: two hosts off.
    inst = build_instance(four_hosts(), _turtles([2, 2, 4, 6]))
    spread = (0, 1, 2, 3)
    w = Weights(1, 1, 1)
    k, _ = bounds(inst).linear(w)
    assert exchange(inst, spread, k=k, deadline=time.monotonic() + 5) == spread
    after = consolidate(inst, spread, k=k, deadline=time.monotonic() + 5)
    assert not violations(inst, after)
    assert len(set(after)) == 2
    assert evaluate(inst, after).P < evaluate(inst, spread).P


def test_moving_bytes_that_cost_more_than_the_watts_saved_is_not_done() -> None:
    # The same, with a current placement and migration weighing far more than power.
    spread = (0, 1, 2, 3)
    names = [f"j{i}-c" for i in range(4)]
    current = Placement(assignment={n: f"h{h}" for n, h in zip(names, spread, strict=True)})
    inst = build_instance(four_hosts(), _turtles([2, 2, 4, 6]), current)
    k, _ = bounds(inst).linear(Weights(1, 1, 1, 1000))
    assert consolidate(inst, spread, k=k, deadline=time.monotonic() + 5) == spread


def test_emptying_never_raises_f_and_keeps_every_constraint() -> None:
    lowered = 0
    for inst, starts in realistic_starts():
        for w in (Weights(6, 10, 4, 1), Weights(10, 1, 1, 1)):
            limits = bounds(inst)
            k, _ = limits.linear(w)
            for placed in starts:
                after = consolidate(inst, placed, k=k, deadline=time.monotonic() + 5)
                lowered += never_worse(inst, w, placed, after)
    assert lowered >= 12, lowered  # 18 of 18 runs when written


def test_a_tried_move_costs_what_making_it_costs_and_leaves_the_state_as_it_was() -> None:
    # State.tried prices a devil's move without making it (lag_change): on realistic
    # snapshots, containers and hosts drawn at random, against step() and, half the
    # time, back.
    rng = random.Random(3)
    devils = 0
    for inst, starts in realistic_starts():
        k, _ = bounds(inst).linear(Weights(6, 10, 4, 1))
        state = State(inst, starts[-1], k)
        for _ in range(400):
            ci, to = rng.randrange(len(inst.containers)), rng.randrange(len(inst.hosts))
            frm = state.host_of[ci]
            hot, lagging = list(state.hot), dict(state.hot_devils)
            priced = state.tried(ci, to)
            assert (state.hot, dict(state.hot_devils)) == (hot, lagging)
            made = state.step(ci, to)
            assert math.isclose(priced, made, rel_tol=1e-9, abs_tol=1e-15), (ci, frm, to)
            devils += inst.containers[ci].devil and made != 0.0
            if rng.random() < 0.5:
                state.step(ci, frm)
    assert devils >= 100, devils
