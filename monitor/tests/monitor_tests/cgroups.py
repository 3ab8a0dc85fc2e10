"""Real cgroups a test or benchmark creates as containers (removed again by ``remove``)."""

from __future__ import annotations

import contextlib
import secrets
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
HIERARCHIES = ("cpuacct", "memory", "unified")


class CgroupSet:
    """Cgroups ``<prefix><name>`` in each v1 hierarchy the monitor reads and in v2."""

    def __init__(self, names: list[str]) -> None:
        self.prefix = f"cmt{secrets.token_hex(3)}."
        self.names = names
        self.dirs: list[Path] = []

    def create(self) -> CgroupSet:
        for name in self.names:
            for h in HIERARCHIES:
                if (ROOT / h).is_dir():
                    d = ROOT / h / f"{self.prefix}{name}"
                    d.mkdir()
                    self.dirs.append(d)
        return self

    def path(self, hierarchy: str, name: str) -> Path:
        return ROOT / hierarchy / f"{self.prefix}{name}"

    def enter(self, pid: int, name: str) -> None:
        for h in HIERARCHIES:
            d = self.path(h, name)
            if d.is_dir():
                (d / "cgroup.procs").write_text(f"{pid}\n")

    def remove_one(self, name: str) -> None:
        for d in [d for d in self.dirs if d.name == f"{self.prefix}{name}"]:
            _rmdir(d)
            self.dirs.remove(d)

    def remove(self) -> None:
        for d in reversed(self.dirs):
            _rmdir(d)
        self.dirs.clear()


def _rmdir(d: Path) -> None:
    """rmdir a cgroup once its processes have gone (bounded wait)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            with contextlib.suppress(OSError):  # move stragglers to the parent
                for pid in (d / "cgroup.procs").read_text().split():
                    (d.parent / "cgroup.procs").write_text(pid + "\n")
            time.sleep(0.05)
