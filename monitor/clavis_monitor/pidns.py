"""Pids a registration sender sees in its own pid namespace, in the monitor's view.

When a Slurm node is a container, slurmstepd (and spank_clavis.so in it) sees its tasks'
pids in the container's pid namespace. The kernel translates the pid of a UNIX socket's
peer (``SO_PEERCRED``) into the reader's namespace, and ``/proc/PID/status`` lists a
process's pid in every namespace from the one of that ``/proc`` down to its own
(``NSpid``, outermost first). So a pid ``x`` the peer sent is the process ``Q`` of the
monitor's ``/proc`` that is in the peer's pid namespace (the same ``ns/pid`` link) and
whose innermost ``NSpid`` entry is ``x``. Tasks are children of slurmstepd, so the
peer's children are looked at first where the kernel lists them (CONFIG_PROC_CHILDREN);
otherwise, or for what is left, a scan of ``/proc`` that reads a process's status only
when its ``ns/pid`` is the sender's (about 10 ms for 200 processes on a loaded 2-core
machine: well inside the plugin's 200 ms budget).

Manual equivalent: ``grep NSpid /proc/PID/status`` and ``readlink /proc/PID/ns/pid``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

MAX_SCAN = 1_000_000  # /proc entries looked at by one fallback scan


class PidNamespaceError(Exception):
    """The sender's pids cannot be translated (the reason is the message)."""


def parse_nspid(status: str) -> tuple[int, ...]:
    """The ``NSpid`` line of a ``/proc/PID/status`` text (outermost first); empty when
    the line is missing (kernels before 4.1) or malformed."""
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            try:
                return tuple(int(f) for f in line.split()[1:])
            except ValueError:
                return ()
    return ()


@dataclass(frozen=True)
class Peer:
    """The sender as the monitor sees it: its pid here, its pid namespace, and whether
    that is the monitor's own (no translation needed) and its cgroup namespace too."""

    pid: int
    pid_ns: str
    depth: int  # len(NSpid): the peer's namespace level, counted from /proc's
    same_pid_ns: bool
    same_cgroup_ns: bool


def _read(path: Path) -> str:
    return path.read_text(encoding="ascii", errors="replace")


def peer(pid: int, proc: Path = Path("/proc")) -> Peer:
    """Describe the peer ``pid`` (from SO_PEERCRED). Raises PidNamespaceError when the
    kernel gave 0 (the peer's namespace is not below the monitor's) or it is gone."""
    if pid <= 0:
        raise PidNamespaceError("the sender's pid is not visible in the monitor's pid namespace")
    try:
        ns = os.readlink(proc / str(pid) / "ns" / "pid")
        cg_ns = os.readlink(proc / str(pid) / "ns" / "cgroup")
        nspid = parse_nspid(_read(proc / str(pid) / "status"))
        mine = os.readlink(proc / "self" / "ns" / "pid")
        my_cg = os.readlink(proc / "self" / "ns" / "cgroup")
    except OSError as exc:
        raise PidNamespaceError(f"the sender (pid {pid}) cannot be inspected: {exc}") from exc
    if not nspid or nspid[0] != pid:
        raise PidNamespaceError(f"/proc/{pid}/status has no usable NSpid line")
    return Peer(pid, ns, len(nspid), ns == mine, cg_ns == my_cg)


def _children(pid: int, proc: Path) -> list[int]:
    out: list[int] = []
    try:
        for task in (proc / str(pid) / "task").iterdir():
            try:
                out += [int(c) for c in _read(task / "children").split()]
            except (OSError, ValueError):
                continue
    except OSError:
        pass
    return out


def _all_pids(proc: Path) -> Iterable[int]:
    for n, entry in enumerate(os.scandir(proc)):
        if n >= MAX_SCAN:
            return
        if entry.name.isdigit():
            yield int(entry.name)


def translate(sender: Peer, pids: list[int], proc: Path = Path("/proc")) -> dict[int, int]:
    """Map each pid of the sender's view that is a live process of its namespace to
    the monitor's pid; pids that match nothing (exited, or never there) are left out."""
    if sender.same_pid_ns:
        return {p: p for p in pids}
    want = set(pids)
    found: dict[int, int] = {}

    def look(candidates: Iterable[int]) -> None:
        for q in candidates:
            if q in found.values():
                continue
            try:
                # the namespace first: one readlink rules out most processes cheaply
                if os.readlink(proc / str(q) / "ns" / "pid") != sender.pid_ns:
                    continue
                nspid = parse_nspid(_read(proc / str(q) / "status"))
                if len(nspid) != sender.depth or nspid[-1] not in want:
                    continue
            except OSError:
                continue  # exited meanwhile
            found[nspid[-1]] = q
            want.discard(nspid[-1])
            if not want:
                return

    look(_children(sender.pid, proc))  # slurmstepd forked the tasks
    if want:
        look(_all_pids(proc))
    return found
