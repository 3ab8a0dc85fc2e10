"""What a repack plan must gain for the hosts it empties (issue 17; docs/clavisd.md,
Repacking, "Power cycles").

P counts an empty host at its off watts (``empty_host: off``), so a plan that empties a
host looks ``idle_w - off_w`` watts better at once. The saving is real only after host
power switches the host off, and the host comes back on when load returns: a power cycle
costs the energy of a shutdown and a boot (the host at about its idle watts for
``power_cycle_s``, doing no work) and a delay of as long for the jobs that wait for it.
Spread over ``power_horizon_s`` (how long a placement is expected to hold before load
changes again), each host the plan empties costs ``idle_w * power_cycle_s /
power_horizon_s`` watts, which the decision adds to the margin, in F units through P's
normalisation (objectives.Bounds.linear). A plan that empties hosts for a gain smaller than
the cycles it causes is not made: with the dwell times of host power (min_on_s, min_off_s)
this is the hysteresis that keeps consolidation from flapping.

Pure: no store, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence

from clavis.instance import Instance
from clavis.objectives import Bounds, Weights, host_loads


def emptied_hosts(inst: Instance, before: Sequence[int], after: Sequence[int]) -> list[str]:
    """Hosts that hold containers in ``before`` and none in ``after``."""
    was = host_loads(inst, tuple(before))
    now = host_loads(inst, tuple(after))
    return [h.name for h, b, a in zip(inst.hosts, was, now, strict=True) if b > 0 and a == 0]


def cycle_cost(
    inst: Instance,
    before: Sequence[int],
    after: Sequence[int],
    weights: Weights,
    limits: Bounds,
    *,
    power_cycle_s: float,
    power_horizon_s: float,
) -> tuple[float, list[str]]:
    """(F a plan from ``before`` to ``after`` must gain beyond the margin, the hosts it
    empties). Zero when it empties none, or with ``power_cycle_s`` 0."""
    emptied = emptied_hosts(inst, before, after)
    if not emptied or power_cycle_s <= 0:
        return 0.0, emptied
    idle = {h.name: h.idle_w for h in inst.hosts}
    watts = sum(idle[h] for h in emptied) * power_cycle_s / power_horizon_s
    k_p = limits.linear(weights)[0][0]  # F per watt of P
    return k_p * watts, emptied
