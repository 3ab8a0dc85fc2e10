"""Traffic accounting with real nftables rules in the test's own namespaces: counted
bytes equal the bytes sent, in both directions, to and from containers and hosts; peers
are classified by the topology, nothing else is touched, and the tables go away on stop."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clavis_monitor.agent import Agent
from clavis_monitor.config import parse
from clavis_monitor.traffic import parse_topology, rates

from .cgroups import CgroupSet
from .netns import Net, in_ns, sh

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, nft, cgroups)")

PORT = 9999
RECEIVE = (
    "import socket,sys; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);"
    f"s.bind(('0.0.0.0',{PORT})); s.settimeout(30); print('ready', flush=True)\n"
    "try:\n while True: s.recv(65535)\nexcept OSError: pass"
)
# arguments DST:COUNT:SIZE[:SRC]: COUNT datagrams of SIZE bytes to DST, from SRC if given
SEND = (
    "import socket,sys,time\n"
    "for a in sys.argv[1:]:\n"
    " dst, n, size, *src = a.split(':')\n"
    " s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    " if src: s.bind((src[0], 0))\n"
    f" for _ in range(int(n)): s.sendto(b'x'*int(size), (dst, {PORT})); time.sleep(0.0005)\n"
    " s.close()\n"
)
H1, H3 = "10.77.1.1", "10.77.2.3"  # the hosts' own addresses: h1 = br0, h3 = beside c
A, B, D, C = "10.77.1.11", "10.77.1.12", "10.77.1.14", "10.77.2.13"
TOPOLOGY = f"""
[[hosts]]
name = "h1"
rack = "r1"
addresses = ["{H1}"]
[[hosts]]
name = "h2"
rack = "r1"
[[hosts]]
name = "h3"
rack = "r2"
addresses = ["{H3}"]
[[containers]]
name = "a"
host = "h1"
addresses = ["{A}"]
[[containers]]
name = "b"
host = "h1"
addresses = ["{B}"]
[[containers]]
name = "d"
host = "h2"
addresses = ["{D}"]
[[containers]]
name = "c"
host = "h3"
addresses = ["{C}"]
"""


def wire(n: int, size: int) -> int:
    """Bytes of n UDP datagrams of size bytes as the bridge counts them (IPv4 + UDP)."""
    return n * (size + 28)


@pytest.fixture
def net() -> Iterator[Net]:
    n = Net().up()
    try:
        yield n
    finally:
        n.down()


@pytest.fixture
def cgroups() -> Iterator[CgroupSet]:
    cs = CgroupSet(["a", "b"]).create()
    try:
        yield cs
    finally:
        cs.remove()


def _agent(tmp_path: Path, net: Net, cgroups: CgroupSet, nft: list[str]) -> Agent:
    (tmp_path / "topology.toml").write_text(TOPOLOGY)
    cfg = parse(
        {
            "host": "h1",
            "containers": {"scan_prefixes": [cgroups.prefix], "lxc_paths": []},
            "traffic": {"nft": nft, "topology_file": str(tmp_path / "topology.toml")},
            "power": {"methods": ["rapl"], "rapl_root": str(tmp_path / "no-rapl")},
        }
    )
    return Agent(cfg, None)


def _ruleset_without_ours(ns: str) -> str:
    out = in_ns(ns, "nft", "list", "ruleset")
    return "\n".join(ln for ln in out.split("table ") if "clavis_monitor" not in ln)


def test_topology_with_host_addresses() -> None:
    topo = parse_topology(TOPOLOGY)
    assert topo.owner()[H1] == "h1" and topo.owner()[C] == "c"
    assert [topo.classify("h1", p) for p in ("h1", "a", "h2", "d", "h3", "c", "zz")] == [
        "same-host", "same-host", "same-rack", "same-rack", "cross-rack", "cross-rack", None
    ]  # fmt: skip
    bad = TOPOLOGY + '[[containers]]\nname = "h2"\nhost = "h1"\naddresses = ["10.77.1.1"]\n'
    with pytest.raises(ValueError) as err:
        parse_topology(bad)
    assert "'h2' is also a host's name" in str(err.value)
    assert "address 10.77.1.1 belongs to both h1 and h2" in str(err.value)


def test_rates_sum_both_directions_and_restarted_counters() -> None:
    topo = parse_topology(TOPOLOGY)
    local = {"a": (A,), "b": (B,)}
    before = {(A, B): 100, (B, A): 10, (A, C): 500, (H1, A): 7}
    after = {(A, B): 300, (B, A): 60, (A, C): 200, (C, A): 40, (H1, A): 7, (A, H3): 9}
    per = rates(before, after, 2.0, local=local, topo=topo, host="h1")
    got = {n: {p.peer: (p.sent_per_s, p.received_per_s, p.link) for p in v} for n, v in per.items()}
    assert got == {
        # (A, C) went down: re-created, its whole value counts; (H1, A) did not move
        "a": {"b": (100.0, 25.0, "same-host"), "c": (100.0, 20.0, "cross-rack"),
              "h3": (4.5, 0.0, "cross-rack")},
        "b": {"a": (25.0, 100.0, "same-host")},
    }  # fmt: skip
    assert per["a"][0].bytes_per_s == 125.0


def test_counted_bytes_match_the_bytes_both_ways_and_links_are_classified(
    tmp_path: Path, net: Net, cgroups: CgroupSet
) -> None:
    a = net.add_bridged("a", A)
    b = net.add_bridged("b", B)
    d = net.add_bridged("d", D)
    c = net.add_routed("c", C)
    in_ns(c, "ip", "addr", "add", f"{H3}/24", "dev", "eth0")  # host h3, beyond the router
    sh("nsenter", f"--net=/run/netns/{net.host}", "nft", "add", "table", "inet", "someone_else")
    before_rules = _ruleset_without_ours(net.host)
    before_ipt = in_ns(net.host, "iptables-save")
    agent = _agent(tmp_path, net, cgroups, ["nsenter", f"--net=/run/netns/{net.host}", "nft"])
    receivers = [
        subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{ns}", "--", sys.executable, "-c", RECEIVE],
            stdout=subprocess.PIPE, text=True,
        )
        for ns in (a, b, c, d, net.host)
    ]  # fmt: skip
    try:
        for r in receivers:  # bound before anything is sent: no ICMP port unreachable
            assert r.stdout is not None and r.stdout.readline() == "ready\n"
        agent.sample_cpu()
        assert {x.name for x in agent.containers} == {"a", "b"}
        agent.sample_traffic()  # installs the tables, first reading
        assert agent.traffic_state == "ok", agent.traffic_state
        assert agent.nft is not None and agent._traffic_last is not None
        base, t0 = agent._traffic_last
        # (sender namespace, source address or "", destination, count, size)
        sends = [
            (a, "", B, 40, 1000), (a, "", D, 25, 1200), (a, "", C, 30, 800),
            (a, "", H1, 12, 500), (a, "", H3, 9, 700),
            (b, "", A, 7, 1100), (d, "", A, 11, 300), (c, "", A, 13, 900),
            (net.host, "", A, 5, 1300), (c, H3, A, 6, 1000),
        ]  # fmt: skip
        for ns in (a, b, d, c, net.host):
            args = [f"{dst}:{n}:{size}" + (f":{src}" if src else "")
                    for sender, src, dst, n, size in sends if sender == ns]  # fmt: skip
            in_ns(ns, sys.executable, "-c", SEND, *args, timeout=60)
        time.sleep(0.2)
        counts = agent.nft.read()
        src_of = {a: A, b: B, d: D, c: C, net.host: H1}
        expected = {}
        for sender, src, dst, n, size in sends:
            key = (src or src_of[sender], dst)
            expected[key] = expected.get(key, 0) + wire(n, size)
        got = {k: v - base.get(k, 0) for k, v in counts.items() if v != base.get(k, 0)}
        assert got == expected  # every pair, each way, exactly; nothing else counted
        agent.sample_traffic()
        t1 = agent._traffic_last[1]
        agent.sample_cpu()
        report = agent.build_report()
        by_name = {s.name: {t.peer: t.bytes_per_s for t in s.traffic} for s in report.containers}
        both_ways = {  # what the report carries: sent + received, per peer
            "a": {"b": wire(40, 1000) + wire(7, 1100), "d": wire(25, 1200) + wire(11, 300),
                  "c": wire(30, 800) + wire(13, 900), "h1": wire(12, 500) + wire(5, 1300),
                  "h3": wire(9, 700) + wire(6, 1000)},
            "b": {"a": wire(7, 1100) + wire(40, 1000)},
        }  # fmt: skip
        for name, peers in both_ways.items():
            assert set(by_name[name]) == set(peers), name
            for peer, total in peers.items():
                assert by_name[name][peer] * (t1 - t0) == pytest.approx(total, rel=1e-9)
        rate_a = {p.peer: p for p in agent.state.get("traffic", "a").value}  # type: ignore[union-attr]
        assert rate_a["h1"].sent_per_s * (t1 - t0) == pytest.approx(wire(12, 500), rel=1e-9)
        assert rate_a["h1"].received_per_s * (t1 - t0) == pytest.approx(wire(5, 1300), rel=1e-9)
        assert {p: r.link for p, r in rate_a.items()} == {
            "b": "same-host", "h1": "same-host", "d": "same-rack",
            "c": "cross-rack", "h3": "cross-rack",
        }  # fmt: skip
    finally:
        for r in receivers:
            r.kill()
            r.wait(timeout=10)
            if r.stdout is not None:
                r.stdout.close()
        agent.stop()
    listing = in_ns(net.host, "nft", "list", "tables")
    assert "clavis_monitor" not in listing and "someone_else" in listing
    assert _ruleset_without_ours(net.host) == before_rules
    assert in_ns(net.host, "iptables-save") == before_ipt


def test_install_is_idempotent_and_a_missing_nft_is_a_state(
    tmp_path: Path, net: Net, cgroups: CgroupSet
) -> None:
    nft = ["nsenter", f"--net=/run/netns/{net.host}", "nft"]
    agent = _agent(tmp_path, net, cgroups, nft)
    agent.sample_cpu()
    agent.sample_traffic()
    assert agent.nft is not None
    agent.nft.ready = False
    agent.sample_traffic()  # installs over the existing table: idempotent
    assert agent.traffic_state == "ok", agent.traffic_state
    tables = in_ns(net.host, "nft", "list", "tables").split("\n")
    assert [t for t in tables if "clavis_monitor" in t] == ["table bridge clavis_monitor"]
    agent.stop()
    agent.nft.remove()  # removing twice is fine
    broken = _agent(tmp_path, net, cgroups, ["/nonexistent/nft"])
    broken.sample_cpu()
    broken.sample_traffic()
    assert broken.traffic_state.startswith("unavailable: /nonexistent/nft not found")
    report = broken.build_report()  # the agent keeps reporting without traffic
    assert report.containers == [] or all(s.traffic == [] for s in report.containers)
