"""Topology parsing and validation (pure code, no root needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from clavis.model import Cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy" / "testbed"))

from ctb import cluster, topology


def test_default_topology_addresses_are_private_and_unique() -> None:
    topo = topology.load(None, {})
    ips = [c.ip for c in topo.containers()] + [h.ip for h in topo.hosts()] + [topo.head_ip]
    assert len(ips) == len(set(ips)) == 2 * 2 * 2 + 2 * 2 + 1
    assert all(ip.startswith("10.213.") for ip in ips)
    ports = [h.bmc_port for h in topo.hosts()]
    assert ports == [16230, 16231, 16232, 16233]
    # every interface name fits Linux's 15 characters at the largest topology
    big = topology.load(None, {"racks": 20, "hosts_per_rack": 6, "containers_per_host": 8})
    assert max(len(c.veth) for c in big.containers()) <= 15


def test_file_and_flags(tmp_path: Path) -> None:
    f = tmp_path / "t.toml"
    f.write_text("racks = 3\nhosts_per_rack = 1\n[power]\nidle_w = 80\n")
    topo = topology.load(f, {"containers_per_host": 4})
    assert (topo.racks_n, topo.hosts_per_rack, topo.containers_per_host) == (3, 1, 4)
    assert topo.power.idle_w == 80
    assert [c.name for c in topo.containers()][:2] == ["r1h1c1", "r1h1c2"]


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"racks": 0}, "racks: must be in [1, 20], got 0"),
        ({"hosts_per_rack": 99}, "hosts_per_rack"),
        ({"containers_per_host": "two"}, "containers_per_host: must be an integer"),
        ({"net_prefix": "8.8"}, "not a private range"),
        ({"power": {"idle_w": -1}}, "power.idle_w"),
        ({"rackz": 2}, "unknown topology keys: rackz"),
        ({"memory_mb_per_container": 8}, "memory_mb_per_container: must be in [64, 1048576]"),
    ],
)
def test_bad_input_names_field_and_value(data: dict[str, object], needle: str) -> None:
    with pytest.raises(topology.TopologyError) as err:
        topology.from_mapping(data)
    assert needle in str(err.value)


def test_bad_toml_file(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text("racks = = 2\n")
    with pytest.raises(topology.TopologyError, match=r"bad\.toml"):
        topology.load(f, {})
    with pytest.raises(topology.TopologyError, match=r"missing\.toml"):
        topology.load(tmp_path / "missing.toml", {})


def test_cpusets_hold_exactly_cpus_and_spread_over_the_machine() -> None:
    topo = topology.load(None, {"cpus_per_container": 2, "containers_per_host": 2})
    # a machine with enough CPUs for every node: no two containers share one
    big = topo.cpusets(list(range(16)))
    assert all(len(s) == 2 for s in big.values())
    flat = [x for s in big.values() for x in s]
    assert len(flat) == len(set(flat)) == 16
    # 4 CPUs: one host's nodes fit, so they share none; other hosts wrap around
    mid = topo.cpusets([0, 1, 2, 3])
    for h in topo.hosts():
        sets = [set(mid[c.name]) for c in h.containers]
        assert all(len(s) == 2 for s in sets) and not sets[0] & sets[1], sets
    # 2 CPUs (this machine): every node still gets exactly its CPUs=, they overlap
    small = topo.cpusets([0, 1])
    assert set(small.values()) == {(0, 1)}
    one = topology.load(None, {}).cpusets([5, 7])
    assert [one[c] for c in ("r1h1c1", "r1h1c2", "r1h2c1")] == [(5,), (7,), (5,)]
    with pytest.raises(topology.TopologyError, match="cpus_per_container: 3 is more than"):
        topology.load(None, {"cpus_per_container": 3}).cpusets([0, 1])


def test_cluster_document_is_valid_for_the_solver() -> None:
    topo = topology.load(
        None, {"racks": 2, "hosts_per_rack": 3, "containers_per_host": 2, "cpus_per_container": 2}
    )
    doc = Cluster.model_validate(cluster.document(topo, frozenset({"r2h3"})))
    assert [h.name for h in doc.hosts] == ["r1h1", "r1h2", "r1h3", "r2h1", "r2h2", "r2h3"]
    h = doc.hosts[0]
    assert (h.cores, h.domains.count, h.domains.cores_per_domain, h.rack) == (4, 1, 4, "r1")
    assert (h.power.idle_w, h.power.peak_w, h.power.off_w) == (100.0, 260.0, 10.0)
    assert [x.state for x in doc.hosts].count("down") == 1 and doc.hosts[-1].state == "down"
