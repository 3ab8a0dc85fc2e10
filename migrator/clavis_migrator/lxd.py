"""LXD/Incus containers moved with the daemons' own stateful stop, migration and start.

One step, through each host's daemon on its local socket (lxdapi.py):

- source ``checkpoint``: ``PUT /1.0/instances/NAME/state`` ``{"action": "stop",
  "stateful": true}`` (the daemon runs CRIU; the instance is Stopped with its state
  saved in its volume), then ``POST /1.0/instances/NAME`` ``{"migration": true}``: a
  migration source operation whose secrets, with this daemon's address and certificate
  and the instance's config, NICs and addresses, make the "ticket" the agents transfer.
- target ``restore``: ``POST /1.0/instances`` with a ``migration`` source in pull mode:
  the target's daemon fetches the instance (root filesystem and saved state) from the
  source's over HTTPS with those one-time secrets and creates it Stopped and stateful;
  then ``PUT .../state`` ``{"action": "start", "stateful": true}`` (CRIU restore).
- ``verify``: Running, an init pid, every NIC with the MAC and every IPv4 it had.
- ``kill`` on the target: stop at once and delete its copy (the source still has its own).
- rollback on the source: its instance is still there, Stopped with its state:
  ``{"action": "start", "stateful": true}``; ``commit`` on the source deletes it.

The daemons' own live migration (``"live": true``) is not used: when it fails after the
final dump the source has no saved state to come back from (LXD 5.0.2 here reported the
source Running with its init a zombie). Tests: ``test_migrator_lxd.py`` (recorded answers).
"""

from __future__ import annotations

import json
import shutil
import urllib.parse
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from clavis_migrator import announce
from clavis_migrator.backend import BackendError, Size
from clavis_migrator.config import LxdConfig
from clavis_migrator.lxdapi import Client, LxdError, LxdNotFoundError

# the file of a step's images that holds the ticket (the only file an LXD step moves)
TICKET_FILE: Final = "clavis-lxd-ticket.json"
_UNITS: Final = {
    "": 1, "B": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
}  # fmt: skip


@dataclass(frozen=True)
class Ticket:
    """What the target's daemon needs to pull the instance, and what it must look like."""

    host: str  # the source host (the agent's name)
    instance: str
    operation: str  # https://ADDRESS/1.0/operations/ID on the source's daemon
    secrets: dict[str, str]
    certificate: str  # the source daemon's, to check its TLS
    architecture: str
    config: dict[str, str]
    devices: dict[str, dict[str, str]]
    profiles: list[str]
    macs: dict[str, str] = field(default_factory=dict)  # interface -> MAC at the stop
    ipv4: list[str] = field(default_factory=list)  # global IPv4s at the stop

    @staticmethod
    def read(images: Path) -> Ticket:
        f = images / TICKET_FILE
        try:
            return Ticket(**json.loads(f.read_text()))
        except OSError as exc:
            raise BackendError(f"no LXD migration ticket in {images}: {exc.strerror}") from exc
        except (ValueError, TypeError) as exc:
            raise BackendError(f"{f}: not a migration ticket: {exc}") from exc


def size_of(inst: dict[str, Any]) -> Size:
    """Cores and memory of an instance from ``limits.cpu`` (a count, or CPUs such as
    ``0-3,6``; none: 1) and ``limits.memory`` (bytes with LXD's units; a percentage or
    none: 0, no limit)."""
    cfg = inst.get("expanded_config") or inst.get("config") or {}
    name = inst.get("name")
    cpu, mem = str(cfg.get("limits.cpu", "")).strip(), str(cfg.get("limits.memory", "")).strip()
    cores = 1
    if cpu.isdigit():
        cores = int(cpu)
    elif cpu:
        ranges = [part.partition("-")[::2] for part in cpu.split(",")]
        if not all(lo.isdigit() and (hi.isdigit() or not hi) for lo, hi in ranges):
            raise BackendError(f"instance {name}: limits.cpu {cpu!r} is not understood")
        cores = sum(int(hi) - int(lo) + 1 if hi else 1 for lo, hi in ranges)
    memory = 0
    if mem and not mem.endswith("%"):
        num = mem.rstrip("".join(sorted({c for u in _UNITS for c in u})))
        unit = mem[len(num) :]
        if unit not in _UNITS or not num.strip().isdigit():
            raise BackendError(f"instance {name}: limits.memory {mem!r} is not understood")
        memory = int(num) * _UNITS[unit]
    return Size(cores, memory)


def nic_macs(state: dict[str, Any]) -> dict[str, str]:
    """Interface -> MAC of a running instance's state, ``lo`` and MAC-less ones left out."""
    network = state.get("network") or {}
    return {
        ifname: str(nic["hwaddr"]).lower()
        for ifname, nic in sorted(network.items())
        if ifname != "lo" and isinstance(nic, dict) and nic.get("hwaddr")
    }


def ipv4s(state: dict[str, Any]) -> list[str]:
    """Global IPv4 addresses of a running instance's interfaces."""
    out = []
    for ifname, nic in sorted((state.get("network") or {}).items()):
        for a in (nic.get("addresses") or []) if ifname != "lo" else []:
            if a.get("family") == "inet" and a.get("scope") == "global":
                out.append(str(a["address"]))
    return out


def kept_config(config: dict[str, str]) -> dict[str, str]:
    """The instance config the target is created with: the instance's own keys, and of
    LXD's ``volatile.*`` ones only the NICs' MACs (a move keeps the MAC; the rest LXD
    sets again on the target)."""
    return {
        k: v for k, v in config.items() if not k.startswith("volatile.") or k.endswith(".hwaddr")
    }


def sink_request(t: Ticket) -> dict[str, Any]:
    """``POST /1.0/instances`` on the target: create the instance by pulling it."""
    return {
        "name": t.instance, "type": "container", "architecture": t.architecture,
        "config": t.config, "devices": t.devices, "profiles": t.profiles, "stateful": True,
        "source": {
            "type": "migration", "mode": "pull", "operation": t.operation,
            "certificate": t.certificate, "secrets": t.secrets, "instance_only": True,
        },
    }  # fmt: skip


def differences(t: Ticket, state: dict[str, Any]) -> list[str]:
    """What the restored instance lacks of what it had at the stop (MACs, IPv4s)."""
    macs, ips = nic_macs(state), set(ipv4s(state))
    out = [
        f"{ifname} has MAC {macs.get(ifname, 'none')}, had {mac}"
        for ifname, mac in sorted(t.macs.items())
        if macs.get(ifname) != mac
    ]
    out += [f"address {ip} missing" for ip in t.ipv4 if ip not in ips]
    return out


class LxdBackend:
    def __init__(
        self,
        cfg: LxdConfig,
        host: str,
        state_dir: Path,
        announcer: Callable[[int], str] = announce.from_netns,
    ) -> None:
        self.cfg = cfg
        self.host = host
        self.api = Client(cfg.socket, cfg.project, cfg.request_timeout_s)
        self.announcer = announcer
        # tickets of the instances this host's daemon pulled (the target side), so a kill
        # after an agent restart still knows the copy here is the one to delete
        self.received = state_dir / "lxd-received"
        self.received.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _path(self, name: str, sub: str = "") -> str:
        return f"/1.0/instances/{urllib.parse.quote(name, safe='')}{sub}"

    def _instance(self, name: str) -> dict[str, Any] | None:
        try:
            inst = self.api.get(self._path(name))
        except LxdNotFoundError:
            return None
        if not isinstance(inst, dict):
            raise LxdError(f"GET {self._path(name)}: metadata is not an instance")
        return inst

    def _state(self, name: str) -> dict[str, Any]:
        state = self.api.get(self._path(name, "/state"))
        if not isinstance(state, dict):
            raise LxdError(f"GET {self._path(name, '/state')}: metadata is not a state")
        return state

    def _set_state(self, name: str, body: dict[str, Any]) -> None:
        self.api.run("PUT", self._path(name, "/state"), body, self.cfg.timeout_s)

    def running(self) -> dict[str, Size]:
        listing = self.api.get("/1.0/instances", recursion="1")
        if not isinstance(listing, list):
            raise LxdError("GET /1.0/instances?recursion=1: metadata is not a list")
        return {
            str(i["name"]): size_of(i)
            for i in listing
            if isinstance(i, dict)
            and i.get("type", "container") == "container"
            and i.get("status") == "Running"
        }

    def known(self, name: str) -> bool:
        """Whether this host can run ``name``: its daemon answers (a target's daemon
        creates the instance when it pulls it). An unreachable daemon raises LxdError."""
        self._instance(name)
        return True

    def checkpoint(self, name: str, images: Path) -> None:
        inst = self._instance(name)
        if inst is None:
            raise BackendError(f"LXD at {self.cfg.socket} has no instance {name}")
        if inst.get("status") != "Running":
            raise BackendError(f"instance {name} is {inst.get('status')}, not running")
        state = self._state(name)
        server = self.api.get("/1.0")
        cert = (server.get("environment") or {}).get("certificate") if server else None
        if not cert:
            raise LxdError(f"GET /1.0 at {self.cfg.socket}: no server certificate")
        try:
            self._set_state(
                name, {"action": "stop", "stateful": True, "timeout": int(self.cfg.timeout_s)}
            )
        except LxdError as exc:
            raise BackendError(f"stateful stop of {name} refused: {exc}") from exc
        try:
            src = self.api.start_operation(
                "POST", self._path(name),
                {"name": name, "migration": True, "live": False, "instance_only": True},
            )  # fmt: skip
            secrets = src.metadata if isinstance(src.metadata, dict) else {}
            if not {"control", "fs"} <= set(secrets):
                raise LxdError(f"the migration operation has no secrets: {secrets}")
        except LxdError as exc:
            # nothing left the host: run it again from the state it was just stopped with
            try:
                self._start_stateful(name)
            except BackendError as again:
                raise BackendError(f"migration of {name}: {exc}; and {again}") from exc
            raise BackendError(f"migration of {name}: {exc}; started again here") from exc
        ticket = Ticket(
            host=self.host, instance=name,
            operation=f"https://{self.cfg.address}/1.0/operations/{src.id}",
            secrets={k: str(v) for k, v in secrets.items()}, certificate=str(cert),
            architecture=str(inst.get("architecture", "")),
            config=kept_config(inst.get("config") or {}), devices=inst.get("devices") or {},
            profiles=list(inst.get("profiles") or []), macs=nic_macs(state), ipv4=ipv4s(state),
        )  # fmt: skip
        (images / TICKET_FILE).write_text(json.dumps(asdict(ticket)))

    def precheckpoint(self, name: str, images: Path) -> None:
        raise BackendError("the lxd backend has no pre-copy (precopy_rounds must be 0)")

    def restore(self, name: str, images: Path) -> None:
        t = Ticket.read(images)
        if t.instance != name:
            raise BackendError(f"{images}: the ticket is of {t.instance}, not {name}")
        inst = self._instance(name)
        if t.host == self.host:  # the rollback: this daemon kept the instance and its state
            if inst is None:
                raise BackendError(f"instance {name} is gone from LXD at {self.cfg.socket}")
            if inst.get("status") == "Running":
                return
            if not inst.get("stateful"):
                raise BackendError(
                    f"instance {name} is {inst.get('status')} without saved state: starting "
                    "it would lose its processes (lxc start by hand if that is wanted)"
                )
            self._start_stateful(name)
            return
        if inst is not None:
            raise BackendError(
                f"an instance {name} already exists in LXD at {self.cfg.socket} "
                f"({inst.get('status')}); not overwritten"
            )
        (self.received / f"{name}.json").write_text(json.dumps(asdict(t)))
        try:
            self.api.run("POST", "/1.0/instances", sink_request(t), self.cfg.timeout_s)
        except LxdError as exc:
            raise BackendError(f"pulling {name} from {t.host}: {exc}") from exc
        self._start_stateful(name)

    def _start_stateful(self, name: str) -> None:
        try:
            self._set_state(name, {"action": "start", "stateful": True})
        except LxdError as exc:
            raise BackendError(f"stateful start of {name}: {exc}") from exc

    def _expected(self, name: str) -> Ticket | None:
        """The ticket of an instance this daemon pulled (None on the source)."""
        f = self.received / f"{name}.json"
        try:
            return Ticket(**json.loads(f.read_text())) if f.is_file() else None
        except (OSError, ValueError, TypeError) as exc:
            raise BackendError(f"{f}: unreadable: {exc}") from exc

    def verify(self, name: str) -> str:
        inst = self._instance(name)
        status = inst.get("status") if inst else "absent"
        state = self._state(name) if inst else {}
        pid = state.get("pid")
        if status != "Running" or not isinstance(pid, int) or pid <= 0:
            raise BackendError(f"{name} is {status} after the restore (init pid {pid})")
        said = f"Running, init pid {pid}"
        t = self._expected(name)
        if t is not None:
            wrong = differences(t, state)
            if wrong:
                raise BackendError(f"{name} after the restore: {'; '.join(wrong)}")
            said += f", MACs and {len(t.ipv4)} IPv4 address(es) kept"
        if self.cfg.announce:
            said += f", announced {self.announcer(pid)}"
        return said

    def resume(self, name: str) -> None:
        """Nothing: LXD's stateful start lets the instance run at once."""

    def kill(self, name: str) -> None:
        """Stop ``name`` at once if it runs here; on a target, delete the copy it pulled."""
        inst = self._instance(name)
        if inst is None:
            (self.received / f"{name}.json").unlink(missing_ok=True)
            return
        if inst.get("status") == "Running":
            self._set_state(name, {"action": "stop", "force": True})
        if (self.received / f"{name}.json").is_file():
            self.api.run("DELETE", self._path(name), None, self.cfg.timeout_s)
            (self.received / f"{name}.json").unlink(missing_ok=True)

    def commit(self, name: str, images: Path) -> None:
        """The source deletes its stopped instance (and its saved state); the target
        forgets it pulled it. Both drop the ticket."""
        t = Ticket.read(images) if (images / TICKET_FILE).is_file() else None
        (self.received / f"{name}.json").unlink(missing_ok=True)
        if t is not None and t.host == self.host:
            inst = self._instance(name)
            if inst is not None:
                if inst.get("status") == "Running":
                    raise BackendError(f"instance {name} runs here again: not deleted")
                self.api.run("DELETE", self._path(name), None, self.cfg.timeout_s)
        shutil.rmtree(images, ignore_errors=True)
