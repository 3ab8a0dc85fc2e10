"""Slow-link traffic per container: nftables accounting in the monitor's own table.

Manual equivalent: ``nft list set bridge clavis_monitor flows``.
The monitor owns one table, ``bridge`` family, named ``traffic.table`` (default
``clavis_monitor``): containers sit on the host's bridge, whose traffic iptables sees
only through br_netfilter (and then twice over, in the bridge and in FORWARD). The table
counts bytes per (source . destination) address in a dynamic set (see
:class:`NftAccounting`) for every packet between a local container and a peer, in both
directions: the element ``(a . p)`` is what ``a`` sent ``p``, ``(p . a)`` what it
received from ``p``. Peers are the containers and hosts of the topology file. Three
hooks see the packets: ``forward`` (frames bridged between two ports: container to
container, container to uplink and back), ``input`` (frames a container sends to the
host's own MAC: to the host or routed on by it) and ``output`` (frames the host sends to
a container: from the host or routed to it). Each packet is counted once: a local
container's sending is counted in ``forward`` or ``input``, its receiving in
``forward`` or ``output``, and a packet between two local containers by its sender
only. Nothing else is touched: installing replaces only this table (idempotent, one
transaction), removing deletes only it. Peers and their link class come from the
topology file."""

from __future__ import annotations

import json
import subprocess
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

LinkClass = Literal["same-host", "same-rack", "cross-rack"]
Pair = tuple[str, str]


class TrafficError(Exception):
    """Accounting is not available; the message says why."""


@dataclass(frozen=True)
class Topology:
    """Hosts with their racks and addresses, containers with their host and addresses."""

    racks: dict[str, str]  # host -> rack
    hosts: dict[str, str]  # container -> host
    addresses: dict[str, tuple[str, ...]]  # container -> IPv4 addresses
    host_addresses: dict[str, tuple[str, ...]] = field(default_factory=dict)  # host -> IPv4

    def host_of(self, peer: str) -> str | None:
        """The host a peer (container or host) is on; None for an unknown peer."""
        if peer in self.hosts:
            return self.hosts[peer]
        return peer if peer in self.racks else None

    def classify(self, local_host: str, peer: str) -> LinkClass | None:
        """Link class between this host and ``peer``'s host; None for an unknown peer."""
        peer_host = self.host_of(peer)
        if peer_host is None:
            return None
        if peer_host == local_host:
            return "same-host"
        rack = self.racks.get(peer_host)
        if rack is not None and rack == self.racks.get(local_host):
            return "same-rack"
        return "cross-rack"

    def owner(self) -> dict[str, str]:
        """Address -> the container or host that has it."""
        out = {a: h for h, addrs in self.host_addresses.items() for a in addrs}
        out.update({a: c for c, addrs in self.addresses.items() for a in addrs})
        return out


def parse_topology(text: str) -> Topology:
    """A topology file (a host's ``addresses`` are optional: with them, traffic between
    a container and that host is counted too)::

    [[hosts]]
    name = "h1"
    rack = "r1"
    addresses = ["10.0.0.1"]
    [[containers]]
    name = "n1"
    host = "h1"
    addresses = ["10.0.0.11"]
    """
    doc = tomllib.loads(text)
    problems: list[str] = []
    racks: dict[str, str] = {}
    host_addresses: dict[str, tuple[str, ...]] = {}
    for i, h in enumerate(doc.get("hosts", [])):
        if not isinstance(h.get("name"), str) or not isinstance(h.get("rack"), str):
            problems.append(f"hosts[{i}]: needs string name and rack")
            continue
        racks[h["name"]] = h["rack"]
        addrs = h.get("addresses", [])
        if not isinstance(addrs, list) or not all(_ipv4(a) for a in addrs):
            problems.append(f"hosts[{i}] ({h['name']}): addresses must be IPv4 strings")
        elif addrs:
            host_addresses[h["name"]] = tuple(addrs)
    hosts: dict[str, str] = {}
    addresses: dict[str, tuple[str, ...]] = {}
    for i, c in enumerate(doc.get("containers", [])):
        name, host, addrs = c.get("name"), c.get("host"), c.get("addresses", [])
        if not isinstance(name, str) or not isinstance(host, str):
            problems.append(f"containers[{i}]: needs string name and host")
            continue
        if host not in racks:
            problems.append(f"containers[{i}] ({name}): host {host!r} is not in [[hosts]]")
        if name in racks:
            problems.append(f"containers[{i}] ({name}): {name!r} is also a host's name")
        if not isinstance(addrs, list) or not all(_ipv4(a) for a in addrs):
            problems.append(f"containers[{i}] ({name}): addresses must be IPv4 strings")
            continue
        hosts[name] = host
        addresses[name] = tuple(addrs)
    owners: dict[str, str] = {}
    for c, addrs in [*host_addresses.items(), *addresses.items()]:
        for a in addrs:
            if a in owners:
                problems.append(f"address {a} belongs to both {owners[a]} and {c}")
            owners[a] = c
    if problems:
        raise ValueError("topology: " + "; ".join(problems))
    return Topology(racks, hosts, addresses, host_addresses)


def _ipv4(a: object) -> bool:
    if not isinstance(a, str):
        return False
    parts = a.split(".")
    return len(parts) == 4 and all(p.isdigit() and int(p) <= 255 for p in parts)


def addresses_for(local: Mapping[str, Sequence[str]], topo: Topology) -> tuple[set[str], set[str]]:
    """The accounting sets' contents: this host's container addresses, and every known
    container's and host's address (a local container is a peer of the other local ones)."""
    mine = {a for addrs in local.values() for a in addrs}
    peers = set(topo.owner()) | mine
    return mine, peers


def parse_set_counters(doc: dict[str, object]) -> dict[Pair, int]:
    """Bytes per (src, dst) element from ``nft -j list set ...`` output."""
    out: dict[Pair, int] = {}
    items = doc.get("nftables", [])
    assert isinstance(items, list)
    for item in items:
        s = item.get("set") if isinstance(item, dict) else None
        if not isinstance(s, dict):
            continue
        for e in s.get("elem", []):
            elem = e.get("elem", {})
            concat = elem.get("val", {}).get("concat")
            counter = elem.get("counter") or {}
            if isinstance(concat, list) and len(concat) == 2:
                out[(str(concat[0]), str(concat[1]))] = int(counter.get("bytes", 0))
    return out


def _elements(pairs: Iterable[Pair]) -> str:
    return ", ".join(f"{a} . {b}" for a, b in sorted(pairs))


class NftAccounting:
    """The monitor's nftables table; ``nft`` is the argv prefix (e.g. with nsenter).

    Sets: ``locals`` (this host's container addresses), ``peers`` (every known
    container's and host's address, the locals among them) and ``flows``, a dynamic set
    of (source . destination) with a counter per element, one of the two a local
    container, filled from the packet path: only pairs that actually talk get an
    element, so reading costs in proportion to the active flows, not to locals x peers
    (8,128 static pairs cost nft 0.17 s of CPU per listing here). An element idle for
    ``FLOW_TIMEOUT`` expires; its next packet starts a new counter, which ``rates``
    treats as a restart. At ``MAX_FLOWS`` new pairs are not counted (the packets pass).
    """

    FLOW_TIMEOUT = "1h"
    MAX_FLOWS = 65536

    def __init__(self, nft: Sequence[str], table: str, timeout_s: float = 5.0) -> None:
        self.nft, self.table, self.timeout_s = list(nft), table, timeout_s
        self.installed: set[Pair] = set()  # (kind, address): kind "l" local, "p" peer
        self.ready = False

    def _run(self, args: list[str], script: str | None = None) -> str:
        argv = [*self.nft, *args]
        try:
            cp = subprocess.run(argv, input=script, capture_output=True, text=True,
                                timeout=self.timeout_s, check=False)  # fmt: skip
        except FileNotFoundError as exc:
            raise TrafficError(f"{argv[0]} not found: install nftables") from exc
        except subprocess.TimeoutExpired as exc:
            raise TrafficError(f"{' '.join(argv[:3])} timed out after {self.timeout_s} s") from exc
        if cp.returncode != 0:
            raise TrafficError(f"nft {' '.join(args)} failed: {cp.stderr.strip()[:300]}")
        return cp.stdout

    @staticmethod
    def _members(locals_: Iterable[str], peers: Iterable[str]) -> set[Pair]:
        return {("l", a) for a in locals_} | {("p", a) for a in peers}

    def install(self, locals_: Iterable[str], peers: Iterable[str]) -> None:
        """(Re)create the table with these addresses, atomically (one transaction)."""
        members = self._members(locals_, peers)
        lists = {k: ", ".join(sorted(a for kind, a in members if kind == k)) for k in "lp"}
        # sent: a local container is the source; received: the destination (and the
        # source is no local container, whose sending is counted already)
        sent = "ip saddr @locals ip daddr @peers update @flows { ip saddr . ip daddr }"
        received = (
            "ip daddr @locals ip saddr != @locals ip saddr @peers "
            "update @flows { ip saddr . ip daddr }"
        )
        t = self.table
        lines = [
            f"add table bridge {t}",
            f"delete table bridge {t}",
            f"table bridge {t} {{",
            "  set locals { type ipv4_addr;"
            + (f" elements = {{ {lists['l']} }};" if lists["l"] else "") + " }",
            "  set peers { type ipv4_addr;"
            + (f" elements = {{ {lists['p']} }};" if lists["p"] else "") + " }",
            f"  set flows {{ type ipv4_addr . ipv4_addr; size {self.MAX_FLOWS}; "
            f"flags dynamic,timeout; timeout {self.FLOW_TIMEOUT}; counter; }}",
            "  chain forward { type filter hook forward priority 0; policy accept;",
            f"    {sent}; {received}; }}",
            f"  chain input {{ type filter hook input priority 0; policy accept; {sent}; }}",
            "  chain output { type filter hook output priority 0; policy accept;",
            f"    {received}; }}",
            "}",
        ]  # fmt: skip
        self._run(["-f", "-"], "\n".join(lines) + "\n")
        self.installed = members
        self.ready = True

    def update(self, locals_: Iterable[str], peers: Iterable[str]) -> None:
        """Add and remove addresses; the flows that stay keep counting."""
        members = self._members(locals_, peers)
        add, drop = members - self.installed, self.installed - members
        if not add and not drop:
            return
        lines = []
        for kind, name in (("l", "locals"), ("p", "peers")):
            gone = sorted(a for k, a in drop if k == kind)
            new = sorted(a for k, a in add if k == kind)
            if gone:
                lines.append(f"delete element bridge {self.table} {name} {{ {', '.join(gone)} }}")
            if new:
                lines.append(f"add element bridge {self.table} {name} {{ {', '.join(new)} }}")
        self._run(["-f", "-"], "\n".join(lines) + "\n")
        self.installed = members

    def read(self) -> dict[Pair, int]:
        """Bytes counted per (local, peer) address pair that has talked."""
        out = self._run(["-j", "list", "set", "bridge", self.table, "flows"])
        return parse_set_counters(json.loads(out))

    def remove(self) -> None:
        """Delete the monitor's table (and nothing else); an absent table is fine."""
        self._run(["-f", "-"], f"add table bridge {self.table}\ndelete table bridge {self.table}\n")
        self.installed = set()
        self.ready = False


@dataclass(frozen=True)
class PeerRate:
    """What a local container exchanged with one peer (container or host), per second."""

    peer: str
    sent_per_s: float
    received_per_s: float
    link: LinkClass

    @property
    def bytes_per_s(self) -> float:
        """Both directions: what the report carries."""
        return self.sent_per_s + self.received_per_s


def rates(
    before: dict[Pair, int],
    after: dict[Pair, int],
    dt: float,
    *,
    local: Mapping[str, Sequence[str]],
    topo: Topology,
    host: str,
) -> dict[str, list[PeerRate]]:
    """Per local container, bytes per second sent to and received from each peer over
    ``dt`` seconds, from the (source, destination) counters. A counter that went down was
    re-created: its whole value is the delta."""
    mine = {a: c for c, addrs in local.items() for a in addrs}
    owner = topo.owner() | mine
    sums: dict[tuple[str, str], list[int]] = {}  # (local, peer) -> [sent, received]
    for (src_a, dst_a), b in after.items():
        prev = before.get((src_a, dst_a), 0)
        delta = b - prev if b >= prev else b
        if delta <= 0:
            continue
        src, dst = mine.get(src_a), mine.get(dst_a)
        if src is not None:  # a local container sent it
            peer = owner.get(dst_a)
            if peer is not None and peer != src:
                sums.setdefault((src, peer), [0, 0])[0] += delta
        if dst is not None:  # a local container received it
            peer = owner.get(src_a)
            if peer is not None and peer != dst:
                sums.setdefault((dst, peer), [0, 0])[1] += delta
    out: dict[str, list[PeerRate]] = {}
    for (name, peer), (sent, received) in sorted(sums.items()):
        link = topo.classify(host, peer)
        if link is not None:
            out.setdefault(name, []).append(PeerRate(peer, sent / dt, received / dt, link))
    return out
