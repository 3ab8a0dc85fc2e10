"""Where each node container lives now: the testbed's record of migrations.

A node's name says its home host (r1h2c1 starts on r1h2), but clavis-migrator moves
running containers between hosts, so everything that must reach a node through its
host (lxc-* commands run in the host's netns, the host's monitor, powerd's watts) asks
this record instead of the name. It is /run/clavis-testbed/placement.json:

    {"format": "clavis-testbed.placement/1", "nodes": {"r1h1c1": "r1h1", ...}}

written at up with every node at home, and updated by the migrators' network hook
(`clavis-testbed node-moved restored NODE HOST`, run by the agent that has just
restored NODE on HOST, before the step commits and after a rollback), which also
- points the node's monitor socket at HOST's monitor: every node sees the hosts' socket
  directories read-only at the same path, and `/run/clavis-testbed/monitor/monitor.sock`
  in the node is a symlink (in a per-node directory, also read-only in the node) that
  the hook re-points, so spank_clavis in a moved node registers with its new host's
  monitor without a remount (the mounts a container had are what CRIU restores);
- rewrites each host's monitor include file (`monitors/HOST/containers.txt`), which the
  monitor re-reads (`containers.include_file`): the machine's cgroups hold every node,
  so each monitor must be told which are on its host.
Writers hold an exclusive flock on placement.lock; the file is replaced atomically.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import paths
from .topology import Topology

FILE = paths.RUN / "placement.json"
LOCK = paths.RUN / "placement.lock"
FORMAT = "clavis-testbed.placement/1"
SOCKETS = paths.RUN / "sockets"  # SOCKETS/HOST: that host's monitor socket directory
NODE_LINKS = paths.RUN / "nodesock"  # NODE_LINKS/NODE/monitor.sock -> its host's socket
MONITORS = paths.RUN / "monitors"  # MONITORS/HOST: that monitor's config, include file
SOCKET_NAME = "monitor.sock"
INCLUDE_NAME = "containers.txt"


class PlacementError(Exception):
    """A node or host the testbed does not have."""


def home(node: str) -> str:
    """The host a node starts on: container names are HOSTcN (topology.py)."""
    return node.rsplit("c", 1)[0]


def read() -> dict[str, str]:
    """Node -> host as recorded ({} before up or for a testbed from before the record)."""
    try:
        doc = json.loads(FILE.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return {}
    nodes = doc.get("nodes")
    if not isinstance(nodes, dict):
        return {}
    return {str(k): str(v) for k, v in nodes.items()}


def host_of(node: str) -> str:
    """Where a node lives now (its home host when nothing records otherwise)."""
    return read().get(node) or home(node)


def include_file(host: str) -> Path:
    return MONITORS / host / INCLUDE_NAME


def socket_dir(host: str) -> Path:
    return SOCKETS / host


def node_link_dir(node: str) -> Path:
    return NODE_LINKS / node


@contextmanager
def _locked() -> Iterator[None]:
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _link(node: str, host: str) -> None:
    """Point the node's monitor.sock at its host's monitor socket (replaced atomically:
    a registration never finds the name missing)."""
    d = node_link_dir(node)
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{SOCKET_NAME}.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(socket_dir(host) / SOCKET_NAME)
    os.replace(tmp, d / SOCKET_NAME)


def _publish(topo: Topology, nodes: dict[str, str]) -> None:
    _write_atomic(FILE, json.dumps({"format": FORMAT, "nodes": nodes}, indent=1) + "\n")
    for h in topo.hosts():
        mine = sorted(n for n, on in nodes.items() if on == h.name)
        _write_atomic(include_file(h.name),
                      f"# nodes on {h.name} (clavis-testbed, placement.py)\n"
                      + "".join(f"{n}\n" for n in mine))  # fmt: skip
    for node, host in nodes.items():
        _link(node, host)


def init(topo: Topology) -> None:
    """Every node at home (up): the record, the include files and the socket links."""
    with _locked():
        _publish(topo, {c.name: c.host for c in topo.containers()})


def moved(topo: Topology, node: str, host: str) -> None:
    """Record that ``node`` now runs on ``host`` (the network hook); idempotent."""
    if node not in {c.name for c in topo.containers()}:
        raise PlacementError(f"no node {node!r} in this testbed")
    if host not in {h.name for h in topo.hosts()}:
        raise PlacementError(f"no host {host!r} in this testbed")
    with _locked():
        nodes = read() or {c.name: c.host for c in topo.containers()}
        nodes[node] = host
        _publish(topo, nodes)


def by_host(topo: Topology) -> dict[str, list[str]]:
    """Host -> the nodes on it now, in topology order."""
    where = read()
    out: dict[str, list[str]] = {h.name: [] for h in topo.hosts()}
    for c in topo.containers():
        out.setdefault(where.get(c.name, c.host), []).append(c.name)
    return out


ROUTE_FOLLOW = paths.HERE / "route-follow"


def hook(topo: Topology, what: str, node: str, host: str) -> str:
    """clavis-migrator's network hook on the testbed (`network_hook`, docs/migrator.md):
    `restored NODE HOST`. First the core's host route (route-follow: a failure fails
    the hook, and the agent undoes the move), then the record. Returns what it did."""
    if what != "restored":
        raise PlacementError(f"unknown hook event {what!r} (expected 'restored')")
    cp = subprocess.run([str(ROUTE_FOLLOW), what, node, host], capture_output=True,
                        text=True, timeout=60, check=False)  # fmt: skip
    if cp.returncode != 0:
        raise PlacementError(f"route-follow {node} {host} exited {cp.returncode}: "
                             f"{(cp.stderr or cp.stdout).strip()[-500:]}")  # fmt: skip
    moved(topo, node, host)
    return f"{cp.stdout.strip()}; {node} recorded on {host}"
