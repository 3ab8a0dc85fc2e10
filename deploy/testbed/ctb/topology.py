"""Topology of the emulated cluster: racks, hosts, containers, addresses, ports.

Plain data with no side effects, so it can be checked and printed before anything
is built. Addresses come from one private /16 and only ever live inside the
testbed's own network namespaces.
"""

from __future__ import annotations

import ipaddress
import tomllib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Bounds keep names within Linux's 15-character interface limit and the
# addressing plan within one /24 per rack.
MAX_RACKS = 20
MAX_HOSTS_PER_RACK = 6
MAX_CONTAINERS_PER_HOST = 8


class TopologyError(ValueError):
    """A topology file or flag is invalid; the message names the field and value."""


@dataclass(frozen=True)
class Power:
    """Per-host power model: idle watts plus a slope per busy core."""

    idle_w: float = 100.0
    per_core_w: float = 40.0
    standby_w: float = 10.0


@dataclass(frozen=True)
class Container:
    name: str
    host: str
    rack: int
    ip: str
    veth: str


@dataclass(frozen=True)
class Host:
    name: str
    rack: int
    index: int
    ip: str
    netns: str
    uplink: str
    bmc_port: int
    containers: tuple[Container, ...]
    # management network (net.py): the host's own address on it, its veth in the
    # management netns, and its BMC's address there
    mgmt_ip: str = ""
    mgmt_if: str = ""
    bmc_ip: str = ""


@dataclass(frozen=True)
class Rack:
    index: int
    netns: str
    subnet: str
    gateway: str
    core_if: str
    hosts: tuple[Host, ...]


@dataclass(frozen=True)
class Topology:
    racks_n: int = 2
    hosts_per_rack: int = 2
    containers_per_host: int = 2
    cpus_per_container: int = 1
    # cores of each host that no node container uses: room a migration can use (a full
    # cluster's moves form cycles no plan can order; see docs/testbed.md, "Moving nodes")
    spare_cpus_per_host: int = 0
    memory_mb_per_container: int = 1024
    core_rate_mbit: int = 100
    net_prefix: str = "10.213"
    bmc_base_port: int = 16230
    power: Power = field(default_factory=Power)

    def validate(self) -> None:
        """Raise TopologyError listing every problem at once."""
        errors: list[str] = []

        def bounded(name: str, value: int, low: int, high: int) -> None:
            if isinstance(value, bool) or not isinstance(value, int):
                errors.append(f"{name}: must be an integer, got {value!r}")
            elif not low <= value <= high:
                errors.append(f"{name}: must be in [{low}, {high}], got {value}")

        bounded("racks", self.racks_n, 1, MAX_RACKS)
        bounded("hosts_per_rack", self.hosts_per_rack, 1, MAX_HOSTS_PER_RACK)
        bounded("containers_per_host", self.containers_per_host, 1, MAX_CONTAINERS_PER_HOST)
        bounded("cpus_per_container", self.cpus_per_container, 1, 64)
        bounded("spare_cpus_per_host", self.spare_cpus_per_host, 0, 512)
        bounded("memory_mb_per_container", self.memory_mb_per_container, 64, 1048576)
        bounded("core_rate_mbit", self.core_rate_mbit, 1, 10000)
        bounded("bmc_base_port", self.bmc_base_port, 1024, 65000)
        try:
            net = ipaddress.ip_network(f"{self.net_prefix}.0.0/16")
            if not net.is_private:
                errors.append(f"net_prefix: {self.net_prefix!r} is not a private range")
        except ValueError:
            errors.append(f"net_prefix: {self.net_prefix!r} is not two octets like '10.213'")
        for key in ("idle_w", "per_core_w", "standby_w"):
            v = getattr(self.power, key)
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 5000:
                errors.append(f"power.{key}: must be a number in [0, 5000], got {v!r}")
        if errors:
            raise TopologyError("; ".join(errors))

    @property
    def head_ip(self) -> str:
        return f"{self.net_prefix}.0.1"

    @property
    def core_netns(self) -> str:
        return "ctb-core"

    # The management network: one bridge in its own netns holding every BMC's address,
    # with a veth into each host's netns and into the head's, as a BMC LAN on real
    # hardware. A /23 of the testbed's /16 above the racks' /24s (at most 20 racks):
    # PREFIX.250.1 the head, PREFIX.250.(10+i) host i, PREFIX.251.(10+i) its BMC.
    @property
    def mgmt_netns(self) -> str:
        return "ctb-mgmt"

    @property
    def mgmt_subnet(self) -> str:
        return f"{self.net_prefix}.250.0/23"

    @property
    def head_mgmt_ip(self) -> str:
        return f"{self.net_prefix}.250.1"

    def racks(self) -> tuple[Rack, ...]:
        out = []
        for r in range(1, self.racks_n + 1):
            hosts = []
            for h in range(1, self.hosts_per_rack + 1):
                name = f"r{r}h{h}"
                index = (r - 1) * self.hosts_per_rack + (h - 1)
                conts = tuple(
                    Container(
                        name=f"{name}c{c}",
                        host=name,
                        rack=r,
                        ip=f"{self.net_prefix}.{r}.{100 + (h - 1) * 10 + c}",
                        veth=f"v-{name}c{c}",
                    )
                    for c in range(1, self.containers_per_host + 1)
                )
                hosts.append(
                    Host(
                        name=name,
                        rack=r,
                        index=index,
                        ip=f"{self.net_prefix}.{r}.{10 + h}",
                        netns=f"ctb-{name}",
                        uplink=f"h-{name}",
                        bmc_port=self.bmc_base_port + index,
                        containers=conts,
                        mgmt_ip=f"{self.net_prefix}.250.{10 + index}",
                        mgmt_if=f"m-{name}",
                        bmc_ip=f"{self.net_prefix}.251.{10 + index}",
                    )
                )
            out.append(
                Rack(
                    index=r,
                    netns=f"ctb-r{r}",
                    subnet=f"{self.net_prefix}.{r}.0/24",
                    gateway=f"{self.net_prefix}.{r}.1",
                    core_if=f"c-r{r}",
                    hosts=tuple(hosts),
                )
            )
        return tuple(out)

    def hosts(self) -> tuple[Host, ...]:
        return tuple(h for r in self.racks() for h in r.hosts)

    def containers(self) -> tuple[Container, ...]:
        return tuple(c for h in self.hosts() for c in h.containers)

    def host_cores(self) -> int:
        """Cores of one emulated physical host: the Slurm CPUs of its containers and its
        spare ones."""
        return self.containers_per_host * self.cpus_per_container + self.spare_cpus_per_host

    def host_slots(self) -> int:
        """How many node containers fit on one host (its cores over a node's CPUs)."""
        return self.host_cores() // self.cpus_per_container

    def cpusets(self, machine_cpus: Sequence[int]) -> dict[str, tuple[int, ...]]:
        """The machine CPUs each container (Slurm node) is pinned to, by name.

        Containers are numbered in topology order (r1h1c1, r1h1c2, ..., r1h2c1, ...) and
        container g takes the cpus_per_container CPUs that follow the previous one's,
        wrapping around the machine's list: so each cpuset has exactly CPUs= members,
        the containers of one host share no CPU while a host's CPUs fit in the machine,
        and no two containers share one while all of them fit. On a smaller machine the
        wrap-around makes containers of different hosts (then of one host) overlap.
        """
        n = len(machine_cpus)
        k = self.cpus_per_container
        if k > n:
            raise TopologyError(
                f"cpus_per_container: {k} is more than the machine's {n} CPUs "
                "(each node's cpuset must hold exactly its CPUs=)"
            )
        cpus = sorted(machine_cpus)
        return {
            c.name: tuple(sorted(cpus[(g * k + j) % n] for j in range(k)))
            for g, c in enumerate(self.containers())
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_KEYS = {
    "racks": "racks_n",
    "hosts_per_rack": "hosts_per_rack",
    "containers_per_host": "containers_per_host",
    "cpus_per_container": "cpus_per_container",
    "spare_cpus_per_host": "spare_cpus_per_host",
    "memory_mb_per_container": "memory_mb_per_container",
    "core_rate_mbit": "core_rate_mbit",
    "net_prefix": "net_prefix",
    "bmc_base_port": "bmc_base_port",
}


def from_mapping(data: dict[str, Any]) -> Topology:
    """Build a Topology from a file's or the flags' key/values (unknown keys are errors)."""
    kwargs: dict[str, Any] = {}
    power: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in data.items():
        if key == "power":
            if not isinstance(value, dict):
                raise TopologyError(f"power: must be a table, got {value!r}")
            for pk, pv in value.items():
                if pk not in ("idle_w", "per_core_w", "standby_w"):
                    unknown.append(f"power.{pk}")
                power[pk] = pv
        elif key in _KEYS:
            kwargs[_KEYS[key]] = value
        else:
            unknown.append(key)
    if unknown:
        raise TopologyError(f"unknown topology keys: {', '.join(sorted(unknown))}")
    topo = Topology(**kwargs, power=Power(**power))
    topo.validate()
    return topo


def load(path: Path | None, overrides: dict[str, Any]) -> Topology:
    """Read a TOML topology file (optional) and apply flag overrides on top."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(path.read_text())
        except OSError as exc:
            raise TopologyError(f"topology file {path}: {exc.strerror}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise TopologyError(f"topology file {path}: {exc}") from exc
    data.update({k: v for k, v in overrides.items() if v is not None})
    return from_mapping(data)


def from_dict(saved: dict[str, Any]) -> Topology:
    """Inverse of Topology.to_dict (for the state file)."""
    fields = dict(saved)
    power = Power(**fields.pop("power"))
    topo = Topology(**fields, power=power)
    topo.validate()
    return topo
