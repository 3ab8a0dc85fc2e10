"""The solver's cluster document for the testbed (solver/clavis/model.py `Cluster`,
docs/schema/cluster.schema.json), written at up and carried by `status --json`.

Stdlib only like the rest of the entry script: this builds plain JSON, and the
integration test validates it with the solver's own model.
"""

from __future__ import annotations

import json
import os
from typing import Any

from . import paths
from .topology import Topology

# The solver's default link classes: the testbed's racks are one switch each and the
# racks meet over the slow tbf core link, so a cross-rack byte costs more than a
# same-rack one; the ratio is the solver's default, not derived from the tbf rate.
SAME_RACK_COST = 1.0
CROSS_RACK_COST = 4.0


def document(topo: Topology, powered_off: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Hosts with their cores (the Slurm CPUs of their containers), one LLC domain per
    host, their rack, the power model of the topology's [power] table (linear, as
    powerd computes it: peak = idle + per_core_w x cores, standby = off), and their
    state: `down` for a host whose chassis was powered off through its BMC."""
    cores = topo.host_cores()
    p = topo.power
    hosts = [
        {
            "name": h.name,
            "cores": cores,
            # one LLC domain per emulated host: the machine has no topology to split
            "domains": {"count": 1, "cores_per_domain": cores},
            "rack": f"r{h.rack}",
            "power": {
                "idle_w": float(p.idle_w),
                "peak_w": float(p.idle_w + p.per_core_w * cores),
                "off_w": float(min(p.standby_w, p.idle_w)),
            },
            "state": "down" if h.name in powered_off else "up",
        }
        for h in topo.hosts()
    ]
    return {
        "schema_version": 1,
        "name": "clavis-testbed",
        "hosts": hosts,
        "links": {"same_rack": SAME_RACK_COST, "cross_rack": CROSS_RACK_COST},
        # a host emptied of containers can be powered off through its BMC (standby_w)
        "empty_host": "off",
        "devils_per_domain": 1,
    }


def powered_off(topo: Topology) -> frozenset[str]:
    """Hosts whose chassis-control state file says off."""
    off = set()
    for h in topo.hosts():
        try:
            if (paths.BMC / h.name / "power").read_text().strip() == "0":
                off.add(h.name)
        except OSError:
            continue
    return frozenset(off)


def write(topo: Topology) -> None:
    paths.CLUSTER.parent.mkdir(parents=True, exist_ok=True)
    tmp = paths.CLUSTER.with_name(paths.CLUSTER.name + ".tmp")
    tmp.write_text(json.dumps(document(topo), indent=1) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, paths.CLUSTER)
