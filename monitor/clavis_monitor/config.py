"""The monitor's configuration file (TOML): every option, its default, and its check.

``load`` lists every problem of a file at once (ConfigError), so an admin fixes them in
one round. docs/monitor.md documents each option; deploy/config/monitor.toml.sample is
a commented copy of the defaults.
"""

from __future__ import annotations

import socket
import tomllib
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Final

POWER_METHODS: Final = ("ipmi-dcmi", "ipmi-sensor", "rapl")
TRAFFIC_BACKENDS: Final = ("nftables", "none")
PERF_EVENTS: Final = ("instructions", "llc_misses", "prefetches")
LXD_SOCKETS: Final = (
    "/var/lib/lxd/unix.socket",
    "/var/snap/lxd/common/lxd/unix.socket",
    "/var/lib/incus/unix.socket",
)


class ConfigError(ValueError):
    """The config file is unusable; the message lists every problem."""


@dataclass(frozen=True)
class ClavisdConfig:
    url: str = "http://127.0.0.1:7780"
    # this host's agent key(s), root-only (clavis_contracts.keys); the first signs
    key_file: str = "/etc/clavis/agent-key.toml"
    # https: the CA certificate(s) clavisd's certificate is checked against; empty: the
    # system's CAs (a self-signed clavisd certificate goes here itself)
    ca_file: str = ""
    timeout_s: float = 5.0
    backoff_min_s: float = 1.0
    backoff_max_s: float = 60.0


@dataclass(frozen=True)
class SpoolConfig:
    dir: str = "/var/lib/clavis-monitor/spool"
    max_reports: int = 20000
    max_bytes: int = 256 * 2**20


@dataclass(frozen=True)
class RegistrationConfig:
    socket: str = "/run/clavis/monitor.sock"
    request_timeout_s: float = 2.0


@dataclass(frozen=True)
class MetricsConfig:
    listen: str = "127.0.0.1"
    port: int = 9782  # 0: no /metrics endpoint


@dataclass(frozen=True)
class ContainersConfig:
    lxc_paths: tuple[str, ...] = ("/var/lib/lxc",)
    cgroup_root: str = "/sys/fs/cgroup"
    # Parent cgroups (relative to each hierarchy) whose children are containers, for the
    # scan fallback: LXC 4+/5 names them lxc.payload.NAME at the hierarchy's top.
    scan_prefixes: tuple[str, ...] = ("lxc.payload.", "lxc/")
    include: tuple[str, ...] = ("*",)  # shell patterns of container names to monitor
    # a file of such patterns (one a line, # comments), read again at every rescan, used
    # instead of `include`: for containers that move between hosts (clavis-migrator)
    include_file: str = ""
    rescan_s: float = 10.0
    # LXD/Incus REST API sockets asked for their instances at each rescan (absent: skipped)
    lxd_sockets: tuple[str, ...] = LXD_SOCKETS
    lxd_timeout_s: float = 1.0


@dataclass(frozen=True)
class PerfConfig:
    enabled: bool = True
    # Raw event codes per event name, e.g. {llc_misses = "0x412e"}; overrides the table.
    raw_events: dict[str, str] = field(default_factory=dict)
    probe_s: float = 60.0  # how often an unsupported host is probed again


@dataclass(frozen=True)
class EmulationConfig:
    # Testbeds only: the directory of emulated per-container miss counters
    # (clavis_monitor.emulated); empty: off. Never used where hardware counters work.
    miss_counters_dir: str = ""


@dataclass(frozen=True)
class TrafficConfig:
    backend: str = "nftables"
    nft: tuple[str, ...] = ("nft",)  # argv prefix, e.g. ["nsenter", "--net=...", "nft"]
    table: str = "clavis_monitor"
    topology_file: str = "/etc/clavis/topology.toml"
    every_s: float = 5.0


@dataclass(frozen=True)
class PowerConfig:
    methods: tuple[str, ...] = POWER_METHODS
    # argv prefix like traffic.nft, e.g. ["nsenter", "--net=/run/netns/host", "ipmitool"]
    ipmitool: tuple[str, ...] = ("ipmitool",)
    bmc_host: str = ""  # empty: in-band (the local BMC through /dev/ipmi0)
    bmc_port: int = 623
    bmc_user: str = "admin"
    bmc_password_file: str = "/etc/clavis/bmc-password"
    sensor: str = ""  # SDR sensor name; empty: the first sensor in Watts
    rapl_root: str = "/sys/class/powercap"
    timeout_s: float = 5.0
    every_s: float = 10.0


@dataclass(frozen=True)
class Config:
    host: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    interval_s: float = 1.0
    clavisd: ClavisdConfig = field(default_factory=ClavisdConfig)
    spool: SpoolConfig = field(default_factory=SpoolConfig)
    registration: RegistrationConfig = field(default_factory=RegistrationConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    containers: ContainersConfig = field(default_factory=ContainersConfig)
    perf: PerfConfig = field(default_factory=PerfConfig)
    emulation: EmulationConfig = field(default_factory=EmulationConfig)
    traffic: TrafficConfig = field(default_factory=TrafficConfig)
    power: PowerConfig = field(default_factory=PowerConfig)


def _coerce(name: str, default: Any, value: Any, problems: list[str]) -> Any:
    """``value`` as the type of ``default``; a problem naming the key when it is not."""
    is_num = isinstance(value, int | float) and not isinstance(value, bool)
    ok = (
        (isinstance(default, bool) and isinstance(value, bool))
        or (type(default) is int and is_num and isinstance(value, int))
        or (isinstance(default, float) and is_num)
        or (isinstance(default, str) and isinstance(value, str))
        or (isinstance(default, tuple) and isinstance(value, list)
            and all(isinstance(v, str) for v in value))
        or (isinstance(default, dict) and isinstance(value, dict)
            and all(isinstance(v, str) for v in value.values()))
    )  # fmt: skip
    if ok:
        if isinstance(default, float):
            return float(value)
        return tuple(value) if isinstance(default, tuple) else value
    problems.append(f"{name}: expected {type(default).__name__}, got {value!r}")
    return default


def _section(obj: Any, doc: dict[str, Any], prefix: str, problems: list[str]) -> Any:
    known = {f.name: f for f in fields(obj)}
    changes: dict[str, Any] = {}
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if key not in known:
            problems.append(f"{name}: unknown option")
            continue
        current = getattr(obj, key)
        if is_dataclass(current):
            if not isinstance(value, dict):
                problems.append(f"{name}: expected a [{name}] table")
                continue
            changes[key] = _section(current, value, f"{name}.", problems)
        else:
            changes[key] = _coerce(name, current, value, problems)
    return replace(obj, **changes)


def _check(cfg: Config, problems: list[str]) -> None:
    if not 0.05 <= cfg.interval_s <= 3600:
        problems.append("interval_s: must be within 0.05..3600")
    if not cfg.clavisd.url.startswith(("http://", "https://")):
        problems.append("clavisd.url: must start with http:// or https://")
    if cfg.clavisd.backoff_min_s <= 0 or cfg.clavisd.backoff_max_s < cfg.clavisd.backoff_min_s:
        problems.append("clavisd.backoff_min_s/backoff_max_s: need 0 < min <= max")
    if cfg.spool.max_reports < 1 or cfg.spool.max_bytes < 4096:
        problems.append("spool: max_reports must be >= 1 and max_bytes >= 4096")
    if not 0 <= cfg.metrics.port <= 65535:
        problems.append("metrics.port: must be within 0..65535")
    if cfg.traffic.backend not in TRAFFIC_BACKENDS:
        problems.append(f"traffic.backend: one of {', '.join(TRAFFIC_BACKENDS)}")
    if not cfg.traffic.table.replace("_", "").isalnum():
        problems.append("traffic.table: letters, digits and _ only")
    if not cfg.power.ipmitool:
        problems.append("power.ipmitool: an empty command")
    bad = [m for m in cfg.power.methods if m not in POWER_METHODS]
    if bad:
        problems.append(f"power.methods: unknown {bad}; known: {', '.join(POWER_METHODS)}")
    bad = [e for e in cfg.perf.raw_events if e not in PERF_EVENTS]
    if bad:
        problems.append(f"perf.raw_events: unknown event {bad}; known: {', '.join(PERF_EVENTS)}")
    for name, code in cfg.perf.raw_events.items():
        try:
            int(code, 0)
        except ValueError:
            problems.append(
                f"perf.raw_events.{name}: {code!r} is not an integer (0x... or decimal)"
            )
    emulated = cfg.emulation.miss_counters_dir
    if emulated and not emulated.startswith("/"):
        problems.append(f"emulation.miss_counters_dir: not an absolute path: {emulated!r}")
    for key in ("every_s", "timeout_s"):
        if getattr(cfg.power, key) <= 0:
            problems.append(f"power.{key}: must be > 0")
    if cfg.traffic.every_s <= 0 or cfg.containers.rescan_s <= 0:
        problems.append("traffic.every_s and containers.rescan_s must be > 0")
    if not 0 < cfg.containers.lxd_timeout_s <= 30:
        problems.append("containers.lxd_timeout_s: must be within 0..30 (not 0)")
    bad = [s for s in cfg.containers.lxd_sockets if not s.startswith("/")]
    if bad:
        problems.append(f"containers.lxd_sockets: not absolute paths: {bad}")


def parse(doc: dict[str, Any]) -> Config:
    problems: list[str] = []
    cfg: Config = _section(Config(), doc, "", problems)
    _check(cfg, problems)
    if problems:
        raise ConfigError("; ".join(problems))
    return cfg


def load(path: Path | None) -> Config:
    """The config at ``path`` (None: all defaults)."""
    if path is None:
        return parse({})
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8: {exc}") from exc
    return parse(doc)
