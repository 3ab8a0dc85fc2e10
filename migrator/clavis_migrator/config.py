"""The migrator's configuration file (TOML): every option, its default, and its check.

``load`` lists every problem of a file at once (ConfigError), so an admin fixes them in
one round. docs/migrator.md documents each option; deploy/config/migrator.toml.sample is
a commented copy of the defaults.
"""

from __future__ import annotations

import os
import socket
import tomllib
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Final

BACKENDS: Final = ("lxc", "lxd")


class ConfigError(ValueError):
    """The config file is unusable; the message lists every problem."""


@dataclass(frozen=True)
class LxcConfig:
    lxcpath: str = "/var/lib/lxc"
    # the criu binary lxc-checkpoint runs (its directory goes first on PATH); empty: PATH's
    criu: str = ""
    # CRIU options, written to the config files named by CRIU_CONFIG_FILE: lxc-checkpoint
    # has no flag for them. mntns-compat-mode is refused by criu dump, so two lists.
    dump_options: tuple[str, ...] = ("tcp-established",)
    restore_options: tuple[str, ...] = ("tcp-established", "mntns-compat-mode")
    # Restore under a private sysfs that shows this process's netns: needed when the agent
    # runs in a netns other than the one /sys was mounted from (the testbed's hosts), as
    # LXC looks the bridge up under /sys/class/net.
    netns_sysfs: bool = False
    # argv run inside the restored container (lxc-attach) to verify it; empty: none
    verify_command: tuple[str, ...] = ()
    # verify that the TCP connections that lasted at the dump are established again
    # (checks.py); a container whose job's peers may close them during the move can
    # turn it off
    tcp_check: bool = True
    # argv run inside the restored container, with SLURMD_NODENAME (its name) and
    # SLURM_CONF (its slurmd's -f), whose answer must name the slurmd of the dump
    # ("Slurmd PID = N", as scontrol prints it); empty: slurmd not asked
    slurmd_check: tuple[str, ...] = ("scontrol", "show", "slurmd")
    # after a restore, broadcast gratuitous ARPs from the container (announce.py), so the
    # layer-2 network learns its new port at once: the "flat layer 2" network hook
    announce: bool = True
    timeout_s: float = 120.0


@dataclass(frozen=True)
class LxdConfig:
    """The LXD/Incus backend (lxd.py): stateful stop, the daemons' own migration, stateful
    start. The same API serves LXD and Incus; only the socket's path differs."""

    # the daemon's local REST socket (snap LXD: /var/snap/lxd/common/lxd/unix.socket,
    # Incus: /var/lib/incus/unix.socket)
    socket: str = "/var/lib/lxd/unix.socket"
    # host:port of this daemon's HTTPS API (core.https_address) as the other hosts' daemons
    # reach it: a target's daemon pulls the instance from there
    address: str = ""
    project: str = "default"
    # one LXD operation (stateful stop, the pull of the instance, stateful start)
    timeout_s: float = 120.0
    # one request that is not an operation
    request_timeout_s: float = 10.0
    # after a restore, broadcast gratuitous ARPs from the container (announce.py)
    announce: bool = True


@dataclass(frozen=True)
class Config:
    host: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    listen: str = "0.0.0.0"
    port: int = 7781
    # this host's agent key(s), root-only (clavis_contracts.keys): the same file as the
    # monitor's; clavisd signs its requests here with one of them
    key_file: str = "/etc/clavis/agent-key.toml"
    state_dir: str = "/var/lib/clavis-migrator"
    max_skew_s: float = 60.0
    # what containers may use on this host; 0: the machine's cores / MemTotal
    cores: int = 0
    memory_bytes: int = 0
    peer_timeout_s: float = 30.0
    # fencing: a target kills a copy it restored unless the source commits within this
    # many seconds of asking for the restore; 0: the restore's longest time (three backend
    # operations and the network hook) plus peer_timeout_s
    restore_lease_s: float = 0.0
    # the image files go to the target in chunks of this size, each signed and checked
    chunk_bytes: int = 8 * 2**20
    transfer_attempts: int = 3
    # iterative pre-copy (precopy.py): at most this many rounds of dumps taken while the
    # container runs, shipped before the final dump; 0: none (one stop-and-copy dump)
    precopy_rounds: int = 0
    backend: str = "lxc"
    # argv of the site's network hook (hooks.py), run after a restore here; empty: none
    network_hook: tuple[str, ...] = ()
    lxc: LxcConfig = field(default_factory=LxcConfig)
    lxd: LxdConfig = field(default_factory=LxdConfig)

    def backend_timeout_s(self) -> float:
        """How long one restore by the configured backend may take."""
        return self.lxd.timeout_s if self.backend == "lxd" else self.lxc.timeout_s

    def host_cores(self) -> int:
        return self.cores or os.cpu_count() or 1

    def host_memory(self) -> int:
        if self.memory_bytes:
            return self.memory_bytes
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
        return 0


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
    )  # fmt: skip
    if ok:
        if isinstance(default, float):
            return float(value)
        return tuple(value) if isinstance(default, tuple) else value
    problems.append(f"{name}: expected {type(default).__name__}, got {value!r}")
    return default


def _section(obj: Any, doc: dict[str, Any], prefix: str, problems: list[str]) -> Any:
    known = {f.name for f in fields(obj)}
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
    if not cfg.host or not cfg.host.replace("-", "").replace("_", "").isalnum():
        problems.append(f"host: letters, digits, - and _ only, got {cfg.host!r}")
    if not 0 <= cfg.port <= 65535:
        problems.append("port: must be within 0..65535")
    for key in ("key_file", "state_dir"):
        if not getattr(cfg, key).startswith("/"):
            problems.append(f"{key}: not an absolute path: {getattr(cfg, key)!r}")
    if not 1 <= cfg.max_skew_s <= 3600:
        problems.append("max_skew_s: must be within 1..3600")
    if cfg.cores < 0 or cfg.memory_bytes < 0:
        problems.append("cores and memory_bytes: must be >= 0 (0: the machine's)")
    if not 0 < cfg.peer_timeout_s <= 3600:
        problems.append("peer_timeout_s: must be within 0..3600 (not 0)")
    if cfg.restore_lease_s != 0 and not 1 <= cfg.restore_lease_s <= 3600:
        problems.append("restore_lease_s: must be within 1..3600, or 0 (derived)")
    if not 4096 <= cfg.chunk_bytes <= 256 * 2**20:
        problems.append("chunk_bytes: must be within 4096..268435456")
    if not 1 <= cfg.transfer_attempts <= 10:
        problems.append("transfer_attempts: must be within 1..10")
    if not 0 <= cfg.precopy_rounds <= 10:
        problems.append("precopy_rounds: must be within 0..10 (0: no pre-copy)")
    if cfg.backend not in BACKENDS:
        problems.append(f"backend: one of {', '.join(BACKENDS)}, got {cfg.backend!r}")
    if cfg.network_hook and not cfg.network_hook[0].startswith("/"):
        problems.append(
            f"network_hook: the command must be an absolute path: {cfg.network_hook[0]!r}"
        )
    if not cfg.lxc.lxcpath.startswith("/"):
        problems.append(f"lxc.lxcpath: not an absolute path: {cfg.lxc.lxcpath!r}")
    if cfg.lxc.criu and not cfg.lxc.criu.startswith("/"):
        problems.append(f"lxc.criu: not an absolute path: {cfg.lxc.criu!r}")
    if "mntns-compat-mode" in cfg.lxc.dump_options:
        problems.append("lxc.dump_options: criu dump refuses mntns-compat-mode (restore only)")
    for key in ("dump_options", "restore_options"):
        bad = [o for o in getattr(cfg.lxc, key) if not o or o.startswith("-") or "\n" in o]
        if bad:
            problems.append(f"lxc.{key}: options are CRIU long names without '--', got {bad}")
    if not 0 < cfg.lxc.timeout_s <= 3600:
        problems.append("lxc.timeout_s: must be within 0..3600 (not 0)")
    _check_lxd(cfg, problems)


def _check_lxd(cfg: Config, problems: list[str]) -> None:
    if not cfg.lxd.socket.startswith("/"):
        problems.append(f"lxd.socket: not an absolute path: {cfg.lxd.socket!r}")
    for key in ("timeout_s", "request_timeout_s"):
        if not 0 < getattr(cfg.lxd, key) <= 3600:
            problems.append(f"lxd.{key}: must be within 0..3600 (not 0)")
    if not cfg.lxd.project or "/" in cfg.lxd.project or "?" in cfg.lxd.project:
        problems.append(f"lxd.project: a project name, got {cfg.lxd.project!r}")
    host, sep, port = cfg.lxd.address.rpartition(":")
    if cfg.lxd.address and (not sep or not host or not port.isdigit()):
        problems.append(f"lxd.address: HOST:PORT, got {cfg.lxd.address!r}")
    if cfg.backend != "lxd":
        return
    if not cfg.lxd.address:
        problems.append(
            "lxd.address: required with backend lxd (this daemon's core.https_address "
            'as the other hosts reach it, e.g. "10.0.0.11:8443")'
        )
    if cfg.precopy_rounds:
        problems.append("precopy_rounds: the lxd backend has no pre-copy (must be 0)")


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
