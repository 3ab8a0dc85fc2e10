"""The state file: everything `up` created, written after every step.

`down` removes exactly what is listed here, so a failed or interrupted `up` can always
be undone, and nothing the testbed did not create is touched.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from . import paths
from .proc import Owned
from .topology import Topology, from_dict

VERSION = 1


class StateError(RuntimeError):
    """The state file is unreadable or from another version."""


@dataclass
class State:
    topology: Topology
    phase: str = "building"  # building -> up
    netns: list[str] = field(default_factory=list)
    processes: list[Owned] = field(default_factory=list)
    containers: list[str] = field(default_factory=list)
    criu: str = ""
    up_seconds: float = 0.0
    # whether LXC's helper cgroup lxc.pivot existed before our first start
    pivot_existed: bool = True
    # `up --power-save`: Slurm's power saving and clavisd's host power (powersave.py)
    power_save: bool = False

    def save(self) -> None:
        paths.RUN.mkdir(parents=True, exist_ok=True)
        data: dict[str, Any] = {
            "version": VERSION,
            "topology": self.topology.to_dict(),
            "phase": self.phase,
            "netns": self.netns,
            "processes": [p.to_dict() for p in self.processes],
            "containers": self.containers,
            "criu": self.criu,
            "up_seconds": self.up_seconds,
            "pivot_existed": self.pivot_existed,
            "power_save": self.power_save,
        }
        tmp = paths.STATE.with_name("state.json.tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, paths.STATE)


def load() -> State | None:
    if not paths.STATE.exists():
        return None
    try:
        data = json.loads(paths.STATE.read_text())
        if data.get("version") != VERSION:
            raise StateError(f"{paths.STATE}: version {data.get('version')!r}, want {VERSION}")
        return State(
            topology=from_dict(data["topology"]),
            phase=str(data["phase"]),
            netns=[str(n) for n in data["netns"]],
            processes=[
                Owned(what=str(p["what"]), pid=int(p["pid"]), started=int(p["started"]))
                for p in data["processes"]
            ],
            containers=[str(c) for c in data["containers"]],
            criu=str(data.get("criu", "")),
            up_seconds=float(data.get("up_seconds", 0.0)),
            pivot_existed=bool(data.get("pivot_existed", True)),
            power_save=bool(data.get("power_save", False)),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StateError(f"{paths.STATE}: unreadable state ({exc})") from exc
