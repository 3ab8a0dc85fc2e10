"""Slurm 22.05 on the containers: every node idle within 30 s of up."""

from __future__ import annotations

from typing import Any

import pytest

from . import tb

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not tb.is_root(), reason="the testbed needs root"),
]


def test_every_node_idle_within_30s_of_up(testbed: dict[str, Any]) -> None:
    names = {c["name"] for h in testbed["hosts"] for c in h["containers"]}
    assert len(names) == 8
    assert testbed["idle_states"] == dict.fromkeys(names, "idle")
    assert testbed["idle_after_s"] <= 30.0


def test_nodes_are_containers_with_their_own_rack_address(testbed: dict[str, Any]) -> None:
    out = tb.slurm(["scontrol", "show", "nodes", "-o"])
    addrs = {}
    for line in out.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "NodeName" in fields:
            addrs[fields["NodeName"]] = fields["NodeAddr"]
    for h in testbed["hosts"]:
        for c in h["containers"]:
            assert addrs[c["name"]] == c["ip"]
            # the container really owns that address on its eth0, in its own netns
            shown = tb.lxc_attach(c["name"], "ip -4 -o addr show dev eth0")
            assert f" {c['ip']}/24 " in shown
            assert f"r{h['rack']}" == c["name"][:2]
    # hostname inside = Slurm node name (slurmd found its NodeName by it)
    assert tb.lxc_attach("r2h2c2", "hostname").strip() == "r2h2c2"
