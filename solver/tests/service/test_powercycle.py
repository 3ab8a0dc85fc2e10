"""The repack decision counts the power cycles of the hosts a plan empties
(powercycle.py; docs/clavisd.md, Repacking, "Power cycles"): consolidating two lone
containers onto one host saves idle_w - off_w = 90 W of P at once, and a power cycle of
idle_w x power_cycle_s spread over power_horizon_s costs 100 W x s / 3600 s, so the plan
is made below s = 3240 s and not above it."""

from __future__ import annotations

import pytest

from clavis.instance import build_instance
from clavis.model import Cluster, Container, Job, Placement, Workload
from clavis.objectives import Weights, bounds
from clavis.service.config import RepackConfig
from clavis.service.powercycle import cycle_cost, emptied_hosts
from clavis.service.repack import decide
from clavis.service.snapshot import Snapshot

from .helpers import cluster_doc

P_ONLY = Weights(1.0, 0.0, 0.0, 0.0)


def _snap() -> Snapshot:
    cluster = Cluster.model_validate(cluster_doc(2, 8))  # idle 100 W, peak 180, off 10
    lone = [Container(name=f"c{i}", cores=1, memory_bytes=0, intensity_mpki=0.5) for i in (1, 2)]
    jobs = [Job(name=f"j{i}", containers=[c]) for i, c in enumerate(lone, start=1)]
    return Snapshot(cluster, Workload(devil_threshold_mpki=10.0, jobs=jobs),
                    Placement(assignment={"c1": "h1", "c2": "h2"}))  # fmt: skip


def _cfg(power_cycle_s: float) -> RepackConfig:
    return RepackConfig(margin=0.0, time_limit_s=5, workers=1, deterministic=True,
                        power_cycle_s=power_cycle_s, power_horizon_s=3600.0)  # fmt: skip


def test_the_cycle_cost_is_the_boot_energy_over_the_horizon_in_f() -> None:
    snap = _snap()
    assert snap.workload is not None
    inst = build_instance(snap.cluster, snap.workload, snap.current)
    limits = bounds(inst)
    assert emptied_hosts(inst, (0, 1), (0, 0)) == ["h2"]
    assert emptied_hosts(inst, (0, 1), (1, 0)) == []  # a swap empties nothing
    cost, emptied = cycle_cost(inst, (0, 1), (0, 0), P_ONLY, limits,
                               power_cycle_s=360.0, power_horizon_s=3600.0)  # fmt: skip
    assert emptied == ["h2"]
    assert cost == pytest.approx(10.0 / (limits.hi.P - limits.lo.P))  # 100 W x 0.1
    assert cycle_cost(inst, (0, 1), (0, 0), P_ONLY, limits, power_cycle_s=0.0,
                      power_horizon_s=3600.0)[0] == 0.0  # fmt: skip


@pytest.mark.parametrize(("power_cycle_s", "decision"), [(0.0, "planned"), (3000.0, "planned"),
                                                        (3500.0, "below-margin")])  # fmt: skip
def test_consolidation_is_planned_only_when_it_pays_for_the_power_cycle(
    power_cycle_s: float, decision: str
) -> None:
    out = decide(_snap(), P_ONLY, _cfg(power_cycle_s))
    assert out.decision == decision, out.message
    if decision == "below-margin":
        assert "power cycles of the 1 hosts it would empty" in out.message
        assert out.plan is None
    else:
        assert out.plan is not None and len(out.plan.steps) == 1
