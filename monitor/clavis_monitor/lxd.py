"""LXD and Incus instances, found through their REST API on the local UNIX socket.

Manual equivalent::

    curl -s --unix-socket /var/lib/lxd/unix.socket 'http://lxd/1.0/instances?recursion=1'
    curl -s --unix-socket /var/lib/lxd/unix.socket http://lxd/1.0/instances/NAME/state

The first lists the instances; for each running container the second gives the PID of
its init and its addresses. The instance's cgroups are where that PID is
(``/proc/PID/cgroup``), so they are right whatever LXD or Incus names them. A socket
that does not exist is no error (no LXD on this host); one that does not answer within
the timeout, or answers an error, gives a state saying so, and that round's instances
come from the cgroup scan alone.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

MAX_ANSWER_BYTES = 16 * 2**20  # one answer; 1024 instances with their config fit easily
ROUND_REQUESTS = 5  # a round with one socket takes at most this many request timeouts

Engine = Literal["lxd", "incus"]


class LxdError(Exception):
    """The REST API did not give a usable answer; the message says why."""


@dataclass(frozen=True)
class Instance:
    """A running container instance: its name, the host PID of its init, its IPv4s."""

    name: str
    pid: int
    addresses: tuple[str, ...]
    engine: Engine


def engine_of(socket_path: str) -> Engine:
    return "incus" if "incus" in socket_path else "lxd"


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("lxd", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


def get(socket_path: str, url: str, timeout: float) -> Any:
    """The ``metadata`` of a sync answer to ``GET url``; LxdError otherwise."""
    conn = _UnixConnection(socket_path, timeout)
    try:
        conn.request("GET", url)
        resp = conn.getresponse()
        body = resp.read(MAX_ANSWER_BYTES + 1)
    except TimeoutError:
        raise LxdError(f"GET {url}: no answer within {timeout} s") from None
    except (OSError, http.client.HTTPException) as exc:
        raise LxdError(f"GET {url}: {exc}") from exc
    finally:
        conn.close()
    if len(body) > MAX_ANSWER_BYTES:
        raise LxdError(f"GET {url}: answer larger than {MAX_ANSWER_BYTES} bytes")
    try:
        doc = json.loads(body)
    except ValueError:
        raise LxdError(f"GET {url}: HTTP {resp.status}, not JSON") from None
    if not isinstance(doc, dict):
        raise LxdError(f"GET {url}: HTTP {resp.status}, not a JSON object")
    if resp.status != 200 or doc.get("type") != "sync":
        why = doc.get("error") or f"type {doc.get('type')!r}"
        raise LxdError(f"GET {url}: HTTP {resp.status}: {str(why)[:200]}")
    return doc.get("metadata")


def _addresses(state: dict[str, Any]) -> tuple[str, ...]:
    """Global IPv4 addresses of the instance's interfaces other than lo."""
    out = []
    network = state.get("network") or {}
    for ifname, nic in sorted(network.items()) if isinstance(network, dict) else ():
        if ifname == "lo" or not isinstance(nic, dict):
            continue
        for a in nic.get("addresses") or ():
            if isinstance(a, dict) and a.get("family") == "inet" and a.get("scope") == "global":
                out.append(str(a.get("address")))
    return tuple(out)


def instances(socket_path: str, timeout: float) -> list[Instance]:
    """The running container instances behind one socket (virtual machines have no
    container cgroups and are left out)."""
    deadline = time.monotonic() + ROUND_REQUESTS * timeout
    listing = get(socket_path, "/1.0/instances?recursion=1", timeout)
    if not isinstance(listing, list):
        raise LxdError("GET /1.0/instances?recursion=1: metadata is not a list")
    found = []
    for inst in listing:
        if not isinstance(inst, dict) or not isinstance(inst.get("name"), str):
            continue
        if inst.get("type", "container") != "container" or inst.get("status") != "Running":
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            raise LxdError(f"listing took more than {ROUND_REQUESTS * timeout} s")
        name = inst["name"]
        url = f"/1.0/instances/{urllib.parse.quote(name, safe='')}/state"
        state = get(socket_path, url, min(timeout, left))
        if not isinstance(state, dict):
            raise LxdError(f"GET {url}: metadata is not an object")
        pid = state.get("pid")
        if not isinstance(pid, int) or pid <= 0:
            continue  # stopped between the two requests
        found.append(Instance(name, pid, _addresses(state), engine_of(socket_path)))
    return found


def container_path(path: str) -> str:
    """A container's own cgroup from the cgroup of its init: up to the ``lxc.payload.``
    directory where there is one, else without a trailing ``init.scope`` (systemd in
    the container moves itself there)."""
    parts = [p for p in path.split("/") if p]
    for i, p in enumerate(parts):
        if p.startswith("lxc.payload."):
            return "/" + "/".join(parts[: i + 1])
    if parts and parts[-1] == "init.scope":
        parts.pop()
    return "/" + "/".join(parts)


def cgroups_of(pid: int, hierarchies: dict[str, Path]) -> dict[str, Path]:
    """The container cgroup of process ``pid`` in each hierarchy the monitor reads
    (controller name, or ``unified`` for v2 -> directory), leaving out hierarchies where
    it sits at the top; {} when it has gone."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    out: dict[str, Path] = {}
    for line in text.splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        names = ["unified"] if hid == "0" and not controllers else controllers.split(",")
        own = container_path(path)
        if own == "/":
            continue  # at a hierarchy's top: no cgroup of its own there
        for name in names:
            hier = hierarchies.get(name)
            if hier is not None and (hier / own[1:]).is_dir():
                out[name] = hier / own[1:]
    return out
