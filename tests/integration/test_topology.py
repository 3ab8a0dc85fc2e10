"""Topology parsing and validation (pure code, no root needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy" / "testbed"))

from ctb import topology


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
