"""The testbed's record of where nodes run (placement.py) and how the demo reads a plan
(pure code and files, no root needed)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy" / "testbed"))

from ctb import demo_moves, placement, topology


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, rel in (("FILE", "placement.json"), ("LOCK", "placement.lock"),
                      ("SOCKETS", "sockets"), ("NODE_LINKS", "nodesock"),
                      ("MONITORS", "monitors")):  # fmt: skip
        monkeypatch.setattr(placement, name, tmp_path / rel)
    return tmp_path


def test_nodes_start_home_and_follow_their_moves(run_dir: Path) -> None:
    topo = topology.load(None, {"spare_cpus_per_host": 1})
    assert topo.host_cores() == 3 and topo.host_slots() == 3
    assert placement.read() == {} and placement.host_of("r2h1c2") == "r2h1"
    placement.init(topo)
    assert placement.read() == {c.name: c.host for c in topo.containers()}
    link = run_dir / "nodesock" / "r1h1c2" / "monitor.sock"
    assert link.readlink() == run_dir / "sockets" / "r1h1" / "monitor.sock"
    placement.moved(topo, "r1h1c2", "r2h2")
    assert placement.host_of("r1h1c2") == "r2h2"
    assert link.readlink() == run_dir / "sockets" / "r2h2" / "monitor.sock"
    lines = (run_dir / "monitors" / "r2h2" / "containers.txt").read_text().splitlines()
    assert [ln for ln in lines if not ln.startswith("#")] == ["r1h1c2", "r2h2c1", "r2h2c2"]
    lines = (run_dir / "monitors" / "r1h1" / "containers.txt").read_text().splitlines()
    assert [ln for ln in lines if not ln.startswith("#")] == ["r1h1c1"]
    assert placement.by_host(topo)["r2h2"] == ["r1h1c2", "r2h2c1", "r2h2c2"]
    placement.moved(topo, "r1h1c2", "r1h1")  # back home; idempotent
    placement.moved(topo, "r1h1c2", "r1h1")
    assert placement.by_host(topo)["r1h1"] == ["r1h1c1", "r1h1c2"]
    doc = json.loads((run_dir / "placement.json").read_text())
    assert doc["format"] == placement.FORMAT


def test_unknown_nodes_hosts_and_events_are_refused(run_dir: Path) -> None:
    topo = topology.load(None, {})
    placement.init(topo)
    before = (run_dir / "placement.json").read_text()
    with pytest.raises(placement.PlacementError, match="no node 'r9h1c1'"):
        placement.moved(topo, "r9h1c1", "r1h1")
    with pytest.raises(placement.PlacementError, match="no host 'r3h1'"):
        placement.moved(topo, "r1h1c1", "r3h1")
    with pytest.raises(placement.PlacementError, match="unknown hook event 'moved'"):
        placement.hook(topo, "moved", "r1h1c1", "r1h2")
    assert (run_dir / "placement.json").read_text() == before
    (run_dir / "placement.json").write_text("{not json")
    assert placement.read() == {} and placement.host_of("r1h2c1") == "r1h2"


def test_topology_refuses_a_negative_spare() -> None:
    with pytest.raises(topology.TopologyError, match="spare_cpus_per_host"):
        topology.load(None, {"spare_cpus_per_host": -1})


def test_final_hosts_take_a_staged_containers_last_step() -> None:
    steps = [{"idx": 1, "container": "a", "target": "h3"},
             {"idx": 0, "container": "a", "target": "h2"},
             {"idx": 2, "container": "b", "target": "h1"}]  # fmt: skip
    assert demo_moves.final_hosts(steps) == {"a": "h3", "b": "h1"}
