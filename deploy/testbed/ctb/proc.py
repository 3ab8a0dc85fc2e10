"""Running commands and owning processes: every process is known by PID + start time.

The start time (field 22 of /proc/PID/stat) guards against killing a recycled PID:
`down` only signals a PID whose start time is the one recorded when we started it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


class CommandError(RuntimeError):
    """A command the testbed needs failed; the message carries its stderr."""


def run(
    argv: Sequence[str],
    *,
    timeout: float = 60.0,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command with a time bound; raise CommandError on failure when check."""
    try:
        cp = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            input=input_text,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise CommandError(f"timed out after {timeout:.0f}s: {' '.join(argv)}") from exc
    except FileNotFoundError as exc:
        raise CommandError(f"not installed: {argv[0]} (run deploy/testbed/install.sh)") from exc
    if check and cp.returncode != 0:
        msg = (cp.stderr or cp.stdout).strip()
        raise CommandError(f"exit {cp.returncode}: {' '.join(argv)}: {msg}")
    return cp


def in_netns(netns: str, argv: Sequence[str]) -> list[str]:
    """Wrap argv to run in a named netns with nsenter.

    Not `ip netns exec`: it remounts /sys, hides the cgroup mounts and breaks
    proctrack/cgroup and CRIU (TESTBED-NOTES, "Namespaces and processes").
    """
    return ["nsenter", f"--net=/run/netns/{netns}", "--", *argv]


# A sysfs mounted from inside a netns shows that netns's interfaces. LXC looks up the
# bridge under /sys/class/net, so lxc-start and CRIU restores need that view; but
# remounting all of /sys (what `ip netns exec` does) hides the cgroup mounts. We
# mount a private sysfs aside and bind only its network directories over /sys.
_NET_SYSFS = """set -e
d=$(mktemp -d /tmp/ctb-sysfs.XXXXXX)
mount -t sysfs sysfs "$d"
mount --bind "$d/class/net" /sys/class/net
mount --bind "$d/devices/virtual/net" /sys/devices/virtual/net
umount -l "$d"
rmdir "$d"
exec "$@"
"""


def in_netns_with_sysfs(netns: str, argv: Sequence[str]) -> list[str]:
    """Like in_netns, plus a private mount namespace whose /sys/class/net is netns's."""
    return in_netns(netns, ["unshare", "--mount", "--", "sh", "-c", _NET_SYSFS, "sh", *argv])


def start_time(pid: int) -> int | None:
    """Start time of PID in clock ticks, or None if it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces and parentheses: split after the last ')'
    rest = stat.rsplit(")", 1)[1].split()
    # PID 1 here reaps orphans late; a zombie still passes kill -0 (TESTBED-NOTES)
    if rest[0] in ("Z", "X"):
        return None
    return int(rest[19])


@dataclass
class Owned:
    """A process the testbed started."""

    what: str
    pid: int
    started: int

    def alive(self) -> bool:
        return start_time(self.pid) == self.started

    def to_dict(self) -> dict[str, object]:
        return {"what": self.what, "pid": self.pid, "started": self.started}


def spawn(what: str, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None) -> Owned:
    """Start a long-running daemon in its own session, output to a log file."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(env) if env is not None else None,
        )
    started = None
    for _ in range(100):  # the /proc entry appears at once; bound the wait anyway
        started = start_time(proc.pid)
        if started is not None:
            break
        if proc.poll() is not None:
            break
        time.sleep(0.01)
    if started is None:
        raise CommandError(f"{what} exited at once; see {log}")
    return Owned(what=what, pid=proc.pid, started=started)


def stop(owned: Owned, grace: float = 5.0) -> None:
    """SIGTERM, wait up to grace seconds, then SIGKILL; wait for /proc/PID to go."""
    stop_all([owned], grace)


def stop_all(owned: Sequence[Owned], grace: float = 5.0) -> None:
    """stop() for several processes at once: SIGTERM to all, one shared wait of at most
    grace seconds, SIGKILL to the survivors, at most 5 s more. For daemons that do not
    depend on each other (the stack's, one per host): each takes up to half a second to
    exit, and stopped one after the other their times add up."""
    live = [p for p in owned if p.alive()]
    for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        for p in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, sig)
        deadline = time.monotonic() + wait_s
        while live and time.monotonic() < deadline:
            for p in live:
                _reap(p.pid)
            live = [p for p in live if p.alive()]
            if live:
                time.sleep(0.05)
        if not live:
            break
    for p in owned:
        _reap(p.pid)


def _reap(pid: int) -> None:
    """Collect our own child's exit status, if it is our child."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def wait_for(
    predicate_desc: str, predicate: Callable[[], bool], timeout: float, step: float = 0.1
) -> None:
    """Poll a zero-argument callable until it returns true, bounded in time."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() > deadline:
            raise CommandError(f"timed out after {timeout:.0f}s waiting for {predicate_desc}")
        time.sleep(step)
