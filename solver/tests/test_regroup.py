"""Whole host contents exchanged between racks (placement/regroup.py)."""

from __future__ import annotations

import time
from typing import Any

from conftest import container, host, instance
from test_gather import never_worse, realistic_starts

from clavis.instance import Assignment, Instance
from clavis.objectives import Weights, bounds, evaluate
from clavis.placement.regroup import host_traffic, regroup, rehome

MB = 1e6


def _pair_job(name: str, bytes_per_s: float) -> dict[str, Any]:
    """Two 4-core turtles that talk."""
    a, b = f"{name}-a", f"{name}-b"
    return {
        "name": name,
        "containers": [container(a, cores=4), container(b, cores=4)],
        "traffic": [{"src": a, "dst": b, "bytes_per_s": bytes_per_s}],
    }


def _two_racks(states: tuple[str, ...] = ("up",) * 4, current: bool = False) -> Instance:
    """Racks r1 (h0, h1) and r2 (h2, h3) of 8-core hosts; jobs x and y of two talking
    containers each, laid out crosswise: x on h0 and h2, y on h1 and h3."""
    hosts = [host(f"h{i}", "r1" if i < 2 else "r2") for i in range(4)]
    for h, s in zip(hosts, states, strict=True):
        h["state"] = s
    cur = {"x-a": "h0", "x-b": "h2", "y-a": "h1", "y-b": "h3"} if current else None
    return instance(hosts, [_pair_job("x", 3 * MB), _pair_job("y", MB)], cur)


CROSSWISE = (0, 2, 1, 3)  # x-a, x-b, y-a, y-b


def _run(inst: Instance, placed: Assignment, w: Weights) -> Assignment:
    k, _ = bounds(inst).linear(w)
    return regroup(inst, placed, k_c=k[2], k_m=k[3], deadline=time.monotonic() + 5)


def test_two_jobs_laid_crosswise_over_two_racks_end_one_rack_each() -> None:
    # Swapping what h1 and h2 run puts each job in a rack of its own; P and D stay.
    inst = _two_racks()
    after = _run(inst, CROSSWISE, Weights(1, 1, 1))
    before_o, after_o = evaluate(inst, CROSSWISE), evaluate(inst, after)
    rack = [h.rack for h in inst.hosts]
    assert rack[after[0]] == rack[after[1]] and rack[after[2]] == rack[after[3]]
    assert (after_o.P, after_o.D) == (before_o.P, before_o.D)
    # both flows crossed racks (cost 4 by default), now both stay in a rack (cost 1)
    cross, same = inst.cross_rack_cost, inst.same_rack_cost
    assert 4 * MB * cross == before_o.C
    assert 4 * MB * same == after_o.C


def test_a_host_of_another_kind_is_not_a_partner() -> None:
    # h1 and h3 have 16 cores: what they run cannot trade places with h0's or h2's (P
    # would change), and the swaps left (h0 with h2, h1 with h3) gather no job.
    hosts = [host(f"h{i}", "r1" if i < 2 else "r2", cores=16 if i % 2 else 8) for i in range(4)]
    inst = instance(hosts, [_pair_job("x", 3 * MB), _pair_job("y", MB)])
    assert _run(inst, CROSSWISE, Weights(1, 1, 1)) == CROSSWISE


def test_a_drained_hosts_residents_stay() -> None:
    inst = _two_racks(("up", "up", "drain", "up"), current=True)
    after = _run(inst, CROSSWISE, Weights(1, 1, 1, 0))
    assert after[1] == 2  # x-b stays on the drained h2
    never_worse(inst, Weights(1, 1, 1, 0), CROSSWISE, after)


def test_moving_bytes_that_cost_more_than_the_traffic_saved_is_not_done() -> None:
    inst = _two_racks(current=True)
    assert _run(inst, CROSSWISE, Weights(1, 1, 1, 1000)) == CROSSWISE
    assert _run(inst, CROSSWISE, Weights(1, 1, 1000, 1)) != CROSSWISE


def test_host_traffic_is_what_c_counts_between_two_hosts() -> None:
    hosts = [host(f"h{i}") for i in range(3)]
    names = [f"a{i}" for i in range(4)]
    job = {"name": "a", "containers": [container(n) for n in names], "all_to_all_bytes_per_s": MB}
    pair = _pair_job("p", 3 * MB)
    pair["traffic"].append({"src": "p-b", "dst": "p-a", "bytes_per_s": MB})
    inst = instance(hosts, [job, pair])
    w = host_traffic(inst, (0, 0, 1, 2, 1, 2)).toarray()
    # all-to-all members on h0, h0, h1, h2: 2 pairs h0-h1, 2 h0-h2, 1 h1-h2, each pair
    # sending MB each way; and the pair job's 3 MB and 1 MB between h1 and h2
    assert w.tolist() == [[0, 4 * MB, 4 * MB], [4 * MB, 0, 6 * MB], [4 * MB, 6 * MB, 0]]


def test_swapping_never_raises_f_keeps_p_and_d_and_every_constraint() -> None:
    lowered = 0
    for inst, starts in realistic_starts():
        for w in (Weights(6, 10, 4, 1), Weights(1, 1, 10, 1)):
            for placed in starts:
                after = _run(inst, placed, w)
                lowered += never_worse(inst, w, placed, after)
                before_o, after_o = evaluate(inst, placed), evaluate(inst, after)
                assert abs(after_o.P - before_o.P) <= 1e-6 * before_o.P
                assert after_o.D == before_o.D
    assert lowered >= 6, lowered


def _rehome(inst: Instance, placed: Assignment, w: Weights) -> Assignment:
    k, _ = bounds(inst).linear(w)
    return rehome(inst, placed, k=k, deadline=time.monotonic() + 5)


def test_rehoming_gathers_a_job_on_a_host_of_another_kind() -> None:
    # The case regroup leaves alone (hosts of two kinds): h1's contents (y-a) may go to
    # the 16-core h3 and h2's (x-b) to h1, or the like; x then runs in one rack. P may
    # change (other watts), D may not.
    hosts = [host(f"h{i}", "r1" if i < 2 else "r2", cores=16 if i % 2 else 8) for i in range(4)]
    inst = instance(hosts, [_pair_job("x", 3 * MB), _pair_job("y", MB)])
    w = Weights(1, 1, 1)
    after = _rehome(inst, CROSSWISE, w)
    assert never_worse(inst, w, CROSSWISE, after)
    rack = [h.rack for h in inst.hosts]
    assert rack[after[0]] == rack[after[1]]  # the heavier job in one rack
    assert evaluate(inst, after).D == evaluate(inst, CROSSWISE).D


def test_rehoming_gathers_a_job_split_over_racks_with_a_host_empty() -> None:
    # x runs on h0 (r1) and h2 (r2); y whole on h3; h1 is empty. Contents trade places
    # (with the empty h1's, or h0's with h3's) until x runs in one rack; y stays whole.
    inst = _two_racks()
    w = Weights(1, 1, 1)
    placed = (0, 2, 3, 3)
    after = _rehome(inst, placed, w)
    rack = [h.rack for h in inst.hosts]
    assert rack[after[0]] == rack[after[1]] and after[2] == after[3]
    c_after = evaluate(inst, after).C
    assert c_after == 3 * MB * inst.same_rack_cost  # it was cross-rack
    assert never_worse(inst, w, placed, after)


def test_rehoming_keeps_every_host_as_contended_as_it_was() -> None:
    # Two 2-core devils on an 8-core host of tolerance 2 contend (4 devil cores); on a
    # 16-core host with 4 domains (tolerance 4) they would not. They may not move there:
    # a job would stop lagging, which the exchange does not price.
    devils = [container("d-a", mpki=20.0), container("d-b", mpki=20.0)]
    jobs = [{"name": "d", "containers": devils}, _pair_job("x", 3 * MB)]
    hosts = [host("h0", "r1"), host("h1", "r2"), host("h2", "r2", cores=16, domains=4)]
    inst = instance(hosts, jobs)
    w = Weights(1, 1, 1)
    placed = (0, 0, 0, 1)
    after = _rehome(inst, placed, w)
    assert after[0] == after[1] and inst.hosts[after[0]].devil_tolerance < 4
    assert evaluate(inst, after).D == evaluate(inst, placed).D
    never_worse(inst, w, placed, after)


def test_rehoming_never_raises_f_keeps_d_and_every_constraint() -> None:
    lowered = 0
    for inst, starts in realistic_starts():
        for w in (Weights(6, 10, 4, 1), Weights(1, 1, 10, 1), Weights(10, 1, 1, 0)):
            for placed in starts:
                after = _rehome(inst, placed, w)
                lowered += never_worse(inst, w, placed, after)
                assert evaluate(inst, after).D == evaluate(inst, placed).D
    assert lowered >= 10, lowered
