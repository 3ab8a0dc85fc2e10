"""Traffic accounting with real nftables rules in the test's own namespaces: counted
bytes equal the bytes sent, peers are classified by the topology, nothing else is
touched, and the tables go away on stop."""

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

from .cgroups import CgroupSet
from .netns import Net, in_ns, sh

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, nft, cgroups)")

PORT = 9999
RECEIVE = (
    "import socket,sys; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);"
    f"s.bind(('0.0.0.0',{PORT})); s.settimeout(30)\n"
    "try:\n while True: s.recv(65535)\nexcept OSError: pass"
)
SEND = (
    "import socket,sys,time; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
    "for dst, n, size in [a.split(':') for a in sys.argv[1:]]:\n"
    f" for _ in range(int(n)): s.sendto(b'x'*int(size), (dst, {PORT})); time.sleep(0.0005)\n"
)
TOPOLOGY = """
[[hosts]]
name = "h1"
rack = "r1"
[[hosts]]
name = "h2"
rack = "r1"
[[hosts]]
name = "h3"
rack = "r2"
[[containers]]
name = "a"
host = "h1"
addresses = ["10.77.1.11"]
[[containers]]
name = "b"
host = "h1"
addresses = ["10.77.1.12"]
[[containers]]
name = "d"
host = "h2"
addresses = ["10.77.1.14"]
[[containers]]
name = "c"
host = "h3"
addresses = ["10.77.2.13"]
"""


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


def test_counted_bytes_match_the_sent_bytes_and_links_are_classified(
    tmp_path: Path, net: Net, cgroups: CgroupSet
) -> None:
    a = net.add_bridged("a", "10.77.1.11")
    b = net.add_bridged("b", "10.77.1.12")
    d = net.add_bridged("d", "10.77.1.14")
    c = net.add_routed("c", "10.77.2.13")
    sh("nsenter", f"--net=/run/netns/{net.host}", "nft", "add", "table", "inet", "someone_else")
    before_rules = _ruleset_without_ours(net.host)
    before_ipt = in_ns(net.host, "iptables-save")
    agent = _agent(tmp_path, net, cgroups, ["nsenter", f"--net=/run/netns/{net.host}", "nft"])
    receivers = [
        subprocess.Popen(["nsenter", f"--net=/run/netns/{ns}", "--", sys.executable, "-c", RECEIVE])
        for ns in (b, c, d)
    ]
    try:
        agent.sample_cpu()
        assert {x.name for x in agent.containers} == {"a", "b"}
        agent.sample_traffic()  # installs the tables, first reading
        assert agent.traffic_state == "ok", agent.traffic_state
        base = agent.nft.read() if agent.nft else {}
        t0 = time.monotonic()
        sends = {"10.77.1.12": (40, 1000), "10.77.1.14": (25, 1200), "10.77.2.13": (30, 800)}
        args = [f"{dst}:{n}:{size}" for dst, (n, size) in sends.items()]
        in_ns(a, sys.executable, "-c", SEND, *args, timeout=60)
        time.sleep(0.2)
        counts = agent.nft.read() if agent.nft else {}
        for dst, (n, size) in sends.items():
            sent = n * (size + 28)  # IPv4 + UDP headers per datagram
            got = counts[("10.77.1.11", dst)] - base.get(("10.77.1.11", dst), 0)
            assert got == sent, (dst, got, sent)
        agent.sample_traffic()
        dt = time.monotonic() - t0
        agent.sample_cpu()
        report = agent.build_report()
        sample = next(s for s in report.containers if s.name == "a")
        by_peer = {t.peer: t.bytes_per_s for t in sample.traffic}
        assert set(by_peer) == {"b", "c", "d"}
        # the rate covers the interval between the two readings (>= the send time)
        assert by_peer["b"] * dt == pytest.approx(40 * 1028, rel=0.3)
        links = {p.peer: p.link for p in agent.state.get("traffic", "a").value}  # type: ignore[union-attr]
        assert links == {"b": "same-host", "d": "same-rack", "c": "cross-rack"}
    finally:
        for r in receivers:
            r.kill()
            r.wait(timeout=10)
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
