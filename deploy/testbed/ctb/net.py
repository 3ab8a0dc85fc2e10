"""Network: one netns per rack switch, per physical host, and one core/head netns.

    container eth0 ── v-NAME ─┐ br0 (host netns ctb-rRhH, host IP) ── uplink
                              │                                        │ veth
    rack switch netns ctb-rR: br0 ── h-rRhH ... ── core (tbf) ─────────┘
                                                    │ veth = the slow core link
    core netns ctb-core: c-rR (tbf, rack gateway IP), routes between racks,
                         head IP on lo (slurmctld), accounting chain CLAVIS-XRACK

    management netns ctb-mgmt: br0 with every BMC's address (ipmi_sim runs here)
        ├─ m-rRhH ── mgmt (in host netns ctb-rRhH, the host's management address)
        └─ m-head ── mgmt (in ctb-core, the head's management address)

Every link is created directly inside our namespaces (`ip -n NS link add … peer …
netns OTHER`), so no interface ever exists in the root namespace and deleting the
namespaces removes every bridge, veth, qdisc and iptables rule we made.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .proc import run
from .topology import Topology

# iptables chain in the core netns counting bytes between rack pairs
XRACK_CHAIN = "CLAVIS-XRACK"


def netns_names(topo: Topology) -> list[str]:
    names = [topo.core_netns]
    for rack in topo.racks():
        names.append(rack.netns)
        names.extend(h.netns for h in rack.hosts)
    names.append(topo.mgmt_netns)
    return names


def existing_netns() -> set[str]:
    d = Path("/run/netns")
    return {p.name for p in d.iterdir()} if d.is_dir() else set()


def stable_mac(kind: str, name: str) -> str:
    """A locally administered MAC fixed by name: 02:cb for container NICs, 02:cc for host
    bridges, so a restored container keeps its MAC and a bridge never takes a port's."""
    prefix = {"container": "02:cb", "bridge": "02:cc"}[kind]
    h = hashlib.sha256(name.encode()).digest()
    return prefix + ":" + ":".join(f"{b:02x}" for b in h[:4])


def _ip(ns: str, *args: str) -> None:
    run(["ip", "-n", ns, *args])


def _sysctl(ns: str, key: str, value: str) -> None:
    # /proc/sys/net is per netns: nsenter --net is enough (no mount namespace needed)
    run(["nsenter", f"--net=/run/netns/{ns}", "--", "sysctl", "-q", "-w", f"{key}={value}"])


def _add_ns(ns: str, created: list[str]) -> None:
    run(["ip", "netns", "add", ns])
    created.append(ns)
    _ip(ns, "link", "set", "lo", "up")


def _tbf(ns: str, dev: str, mbit: int) -> None:
    # burst must hold at least rate/HZ bytes; 64 KiB is ample up to ~10 Gbit/s at HZ=1000
    # with a segmenting tbf. latency bounds the queue so a flood is dropped, not buffered.
    run(
        [
            "tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf",
            "rate", f"{mbit}mbit", "burst", "64kb", "latency", "100ms",
        ]
    )  # fmt: skip


def build(topo: Topology, created: list[str]) -> None:
    """Create every namespace, bridge, veth, tbf and rule; append netns to created."""
    core = topo.core_netns
    _add_ns(core, created)
    _ip(core, "addr", "add", f"{topo.head_ip}/32", "dev", "lo")
    _sysctl(core, "net.ipv4.ip_forward", "1")

    for rack in topo.racks():
        rns = rack.netns
        _add_ns(rns, created)
        _ip(rns, "link", "add", "br0", "type", "bridge")
        _ip(rns, "link", "set", "br0", "up")
        # the core link: rack side "core" in the rack bridge, core side routes
        _ip(core, "link", "add", rack.core_if, "type", "veth", "peer", "name", "core", "netns", rns)
        _ip(core, "addr", "add", f"{rack.gateway}/24", "dev", rack.core_if)
        _ip(core, "link", "set", rack.core_if, "up")
        _ip(rns, "link", "set", "core", "master", "br0", "up")
        # rate-limit both directions: egress of each end
        _tbf(core, rack.core_if, topo.core_rate_mbit)
        _tbf(rns, "core", topo.core_rate_mbit)

        for host in rack.hosts:
            hns = host.netns
            _add_ns(hns, created)
            # An unset bridge MAC follows its lowest port's, and the veth a CRIU restore
            # makes has a random one: the host's MAC then changed under the head's ARP
            # cache on a migration and its agent was unreachable for up to a minute.
            mac = stable_mac("bridge", host.name)
            _ip(hns, "link", "add", "br0", "address", mac, "type", "bridge")
            _ip(hns, "addr", "add", f"{host.ip}/24", "dev", "br0")
            _ip(hns, "link", "set", "br0", "up")
            _ip(
                rns,
                "link",
                "add",
                host.uplink,
                "type",
                "veth",
                "peer",
                "name",
                "uplink",
                "netns",
                hns,
            )
            _ip(rns, "link", "set", host.uplink, "master", "br0", "up")
            _ip(hns, "link", "set", "uplink", "master", "br0", "up")
            _ip(hns, "route", "add", "default", "via", rack.gateway)

    _management(topo, created)
    _accounting(topo)


def _management(topo: Topology, created: list[str]) -> None:
    """The BMCs' network: a bridge in its own netns carrying every BMC's address, and a
    veth from each host's netns (and the head's) into it, so a host reaches its BMC
    over LAN as on real hardware. No route joins it to the racks' networks."""
    mns = topo.mgmt_netns
    _add_ns(mns, created)
    _ip(mns, "link", "add", "br0", "type", "bridge")
    _ip(mns, "link", "set", "br0", "up")
    plen = topo.mgmt_subnet.split("/")[1]
    for host in topo.hosts():
        _ip(mns, "addr", "add", f"{host.bmc_ip}/{plen}", "dev", "br0")
    ends = [(topo.core_netns, "m-head", topo.head_mgmt_ip)]
    ends += [(h.netns, h.mgmt_if, h.mgmt_ip) for h in topo.hosts()]
    for ns, port, ip in ends:
        _ip(mns, "link", "add", port, "type", "veth", "peer", "name", "mgmt", "netns", ns)
        _ip(mns, "link", "set", port, "master", "br0", "up")
        _ip(ns, "addr", "add", f"{ip}/{plen}", "dev", "mgmt")
        _ip(ns, "link", "set", "mgmt", "up")


def _accounting(topo: Topology) -> None:
    """Per rack-pair byte counters on the core router (read with iptables -L -v -x)."""
    ipt = ["nsenter", f"--net=/run/netns/{topo.core_netns}", "--", "iptables", "-w", "5"]
    run([*ipt, "-N", XRACK_CHAIN])
    run([*ipt, "-A", "FORWARD", "-j", XRACK_CHAIN])
    for a in topo.racks():
        for b in topo.racks():
            if a.index != b.index:
                run([*ipt, "-A", XRACK_CHAIN, "-s", a.subnet, "-d", b.subnet, "-j", "RETURN"])


def destroy(names: list[str]) -> list[str]:
    """Delete the given namespaces (only those that exist); return errors."""
    errors = []
    present = existing_netns()
    for ns in reversed(names):
        if ns in present:
            cp = run(["ip", "netns", "del", ns], check=False)
            if cp.returncode != 0:
                errors.append(f"netns {ns}: {cp.stderr.strip()}")
    return errors


def tbf_bytes(ns: str, dev: str) -> int:
    """Bytes sent through the tbf qdisc on dev (tc -s)."""
    out = run(["tc", "-n", ns, "-s", "qdisc", "show", "dev", dev]).stdout
    for line in out.splitlines():
        words = line.split()
        if words[:1] == ["Sent"]:
            return int(words[1])
    return 0
