"""A bound worked out in a process of its own, beside the search (issue 12).

A repack's pool bound (pool.py: column generation, Python pricing and GLOP) and the host
search (gather, exchange, consolidate, calming, hostlns: Python) each keep one core busy.
Run one after the other, a 10 s repack at 1,024 hosts gave the bound up to 45% of its
budget and the search the rest, while the machine's other cores stayed idle. Here the
bound runs in a child process from the start of the solve to the end of the host search,
and the search has the whole budget.

The child reports its floor after each step that raises it, and the placement rounded
from its patterns once (the host search's second start): a child stopped at the deadline
leaves the last floor it reported, which is a valid bound (each master returns one,
settled or not). The parent ends only the child it started, by its handle, and never
waits past the deadline it set.

It runs only where it can gain: two usable cores at least, more than one solver thread
asked for, and not inside a daemonic process (which may not have children). A process
with threads (clavisd's plan threads) starts the child by spawn, not fork: a fork copies
only the calling thread, and a lock another thread held would stay locked in the child.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from clavis.instance import Assignment

# How the work reports a floor or the rounding (either may be None); _child itself adds
# the end, or why the work failed.
Report = Callable[[float | None, Assignment | None], None]
Work = Callable[..., None]  # called as work(*args, report=...)
# Past its deadline the child has this long to say it is done before it is killed: a
# column generation round may overrun by a fraction of a second.
GRACE_SECONDS = 0.3
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, as taskset or a cgroup sets it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def can_run(threads: int) -> bool:
    """Whether a child process beside the search can gain: ``threads`` is the number of
    solver threads asked for (SolveOptions.threads)."""
    if threads < 2 or usable_cores() < 2:
        return False
    return not multiprocessing.current_process().daemon


@dataclass
class Found:
    """What the child has reported so far."""

    floor: float = 0.0
    rounding: Assignment | None = None
    done: bool = False
    error: str = ""


def _die_with(parent: int) -> None:
    """Asks Linux to kill this process when its parent ends (PR_SET_PDEATHSIG): a solve
    killed outright (the bench's watchdog, an OOM kill) leaves no bound running on."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (AttributeError, OSError):  # not Linux: the child still ends at its deadline
        return
    if os.getppid() != parent:  # the parent ended before the request took hold
        os._exit(1)


def _child(conn: Connection, parent: int, work: Work, args: tuple[Any, ...]) -> None:
    _die_with(parent)
    # Ctrl-C reaches the whole process group: the parent stops the child, which
    # would otherwise print a traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def report(floor: float | None, rounding: Assignment | None) -> None:
        conn.send((floor, rounding))

    try:
        work(*args, report=report)
        conn.send(("done", ""))
    except Exception as exc:  # the parent keeps its own floor and says why
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


class Beside:
    """A child process running ``work`` until ``deadline`` (time.monotonic, which every
    process on the machine shares)."""

    def __init__(self, work: Work, args: tuple[Any, ...], deadline: float) -> None:
        ctx = (
            multiprocessing.get_context("fork")
            if threading.active_count() == 1
            else multiprocessing.get_context("spawn")
        )
        self._conn, child_end = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(
            target=_child,
            args=(child_end, os.getpid(), work, args),
            name="clavis-bound",
            daemon=True,
        )
        self.deadline = deadline
        self.found = Found()
        self._closed = False
        self._proc.start()
        child_end.close()  # the parent's copy: EOF reaches the parent when the child ends

    def _read(self, message: tuple[Any, Any]) -> None:
        head, body = message
        if head == "done":
            self.found.done = True
        elif head == "error":
            self.found.done, self.found.error = True, str(body)
        else:
            if head is not None:
                self.found.floor = max(self.found.floor, float(head))
            if body is not None:
                self.found.rounding = tuple(body)

    def _drain(self, wait: float) -> None:
        """Reads every report waiting, and waits up to ``wait`` seconds for the next."""
        while not self._closed and not self.found.done and self._conn.poll(max(0.0, wait)):
            try:
                self._read(self._conn.recv())
            except EOFError:  # the child died without a word (killed, out of memory)
                self.found.done = True
                self.found.error = self.found.error or "the bound's process ended early"
            wait = 0.0

    def poll(self) -> Found:
        """What the child has reported so far, without waiting."""
        self._drain(0.0)
        return self.found

    def finish(self) -> Found:
        """Waits for the child until its deadline (and GRACE_SECONDS), ends it if it is
        still running, and returns what it reported."""
        end = self.deadline + GRACE_SECONDS
        while not self.found.done and time.monotonic() < end:
            self._drain(end - time.monotonic())
        self.stop()
        return self.found

    def stop(self) -> None:
        """Ends the child, which this object started, and reaps it."""
        if self._proc.is_alive():
            self._proc.kill()
        self._proc.join(timeout=5.0)
        if not self._closed:
            self._closed = True
            self._conn.close()
