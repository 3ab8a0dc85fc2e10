"""Slow-link traffic per container: nftables accounting in the monitor's own table.

Manual equivalent: ``nft list set bridge clavis_monitor flows``.
The monitor owns one table, ``bridge`` family, named ``traffic.table`` (default
``clavis_monitor``): containers sit on the host's bridge, whose traffic iptables sees
only through br_netfilter (and then twice over, in the bridge and in FORWARD). The table
counts bytes per (container address . peer address) in a dynamic set (see
:class:`NftAccounting`), updated in two hooks: ``forward`` (frames bridged to a peer on
the same bridge or out through an uplink port) and ``input`` (frames a container sends
to the host's own MAC, i.e. traffic the host routes on). Each sent packet passes exactly
one of them, so it is counted once. Nothing else is touched: installing replaces only
this table (idempotent, one transaction), removing deletes only it. Peers and their link
class come from the topology file."""

from __future__ import annotations

import json
import subprocess
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

LinkClass = Literal["same-host", "same-rack", "cross-rack"]
Pair = tuple[str, str]


class TrafficError(Exception):
    """Accounting is not available; the message says why."""


@dataclass(frozen=True)
class Topology:
    """Hosts with their racks and containers with their host and addresses."""

    racks: dict[str, str]  # host -> rack
    hosts: dict[str, str]  # container -> host
    addresses: dict[str, tuple[str, ...]]  # container -> IPv4 addresses

    def classify(self, local_host: str, peer: str) -> LinkClass | None:
        """Link class between this host and ``peer``'s host; None for an unknown peer."""
        peer_host = self.hosts.get(peer)
        if peer_host is None:
            return None
        if peer_host == local_host:
            return "same-host"
        if self.racks.get(peer_host) is not None and self.racks.get(peer_host) == self.racks.get(
            local_host
        ):
            return "same-rack"
        return "cross-rack"

    def owner(self) -> dict[str, str]:
        """Address -> container."""
        return {a: c for c, addrs in self.addresses.items() for a in addrs}


def parse_topology(text: str) -> Topology:
    """A topology file::

    [[hosts]]
    name = "h1"
    rack = "r1"
    [[containers]]
    name = "n1"
    host = "h1"
    addresses = ["10.0.0.11"]
    """
    doc = tomllib.loads(text)
    problems: list[str] = []
    racks: dict[str, str] = {}
    for i, h in enumerate(doc.get("hosts", [])):
        if not isinstance(h.get("name"), str) or not isinstance(h.get("rack"), str):
            problems.append(f"hosts[{i}]: needs string name and rack")
            continue
        racks[h["name"]] = h["rack"]
    hosts: dict[str, str] = {}
    addresses: dict[str, tuple[str, ...]] = {}
    for i, c in enumerate(doc.get("containers", [])):
        name, host, addrs = c.get("name"), c.get("host"), c.get("addresses", [])
        if not isinstance(name, str) or not isinstance(host, str):
            problems.append(f"containers[{i}]: needs string name and host")
            continue
        if host not in racks:
            problems.append(f"containers[{i}] ({name}): host {host!r} is not in [[hosts]]")
        if not isinstance(addrs, list) or not all(_ipv4(a) for a in addrs):
            problems.append(f"containers[{i}] ({name}): addresses must be IPv4 strings")
            continue
        hosts[name] = host
        addresses[name] = tuple(addrs)
    owners: dict[str, str] = {}
    for c, addrs in addresses.items():
        for a in addrs:
            if a in owners:
                problems.append(f"address {a} belongs to both {owners[a]} and {c}")
            owners[a] = c
    if problems:
        raise ValueError("topology: " + "; ".join(problems))
    return Topology(racks, hosts, addresses)


def _ipv4(a: object) -> bool:
    if not isinstance(a, str):
        return False
    parts = a.split(".")
    return len(parts) == 4 and all(p.isdigit() and int(p) <= 255 for p in parts)


def addresses_for(local: Mapping[str, Sequence[str]], topo: Topology) -> tuple[set[str], set[str]]:
    """The accounting sets' contents: this host's container addresses, and every known
    container's address (a local container is a peer of the other local ones)."""
    mine = {a for addrs in local.values() for a in addrs}
    peers = {a for addrs in topo.addresses.values() for a in addrs} | mine
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
    container's address) and ``flows``, a dynamic set of (local . peer) with a counter
    per element, filled from the packet path: only pairs that actually talk get an
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
        match = "ip saddr @locals ip daddr @peers update @flows { ip saddr . ip daddr }"
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
            f"  chain forward {{ type filter hook forward priority 0; policy accept; {match}; }}",
            f"  chain input {{ type filter hook input priority 0; policy accept; {match}; }}",
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
    peer: str
    bytes_per_s: float
    link: LinkClass


def rates(
    before: dict[Pair, int],
    after: dict[Pair, int],
    dt: float,
    *,
    local: Mapping[str, Sequence[str]],
    topo: Topology,
    host: str,
) -> dict[str, list[PeerRate]]:
    """Per local container, bytes per second sent to each peer over ``dt`` seconds. A
    counter that went down was re-created: its whole value is the delta."""
    owner = topo.owner()
    mine = {a: c for c, addrs in local.items() for a in addrs}
    sums: dict[tuple[str, str], int] = {}
    for pair, b in after.items():
        src, peer = mine.get(pair[0]), owner.get(pair[1])
        if src is None or peer is None or peer == src:
            continue
        prev = before.get(pair, 0)
        delta = b - prev if b >= prev else b
        sums[(src, peer)] = sums.get((src, peer), 0) + delta
    out: dict[str, list[PeerRate]] = {}
    for (src, peer), d in sorted(sums.items()):
        link = topo.classify(host, peer)
        if d > 0 and link is not None:
            out.setdefault(src, []).append(PeerRate(peer, d / dt, link))
    return out
