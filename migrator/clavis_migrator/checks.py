"""What a restore must bring back beyond the process tree: the container's TCP
connections and its slurmd answering (lxc.py's verify).

TCP connections are read from ``/proc/PID/net/tcp`` and ``tcp6``, which show the
sockets of PID's network namespace: the container's own (``ss -tn`` in it). A
connection counts if it was ESTABLISHED at two reads ``LASTING_S`` apart before the
dump: a short RPC (slurmctld pinging slurmd) may rightly end before the restore is
looked at, the job's connections (MPI ranks, srun's I/O) last. After the restore each
must be there again, ESTABLISHED, or closing in order (its ends closed it since:
FIN_WAIT*, TIME_WAIT, CLOSE_WAIT, LAST_ACK, CLOSING); a connection gone or reset was
not restored, or died in the move.

slurmd is asked for its status over Slurm's own protocol (``scontrol show slurmd``:
REQUEST_DAEMON_STATUS, munge-authenticated, sent to the node's NodeAddr and port, which
``SLURMD_NODENAME`` selects in a multiple-slurmd build), from inside the container; the
answer must name the slurmd that ran at the dump (its pid in the container: CRIU keeps
pids).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Final

from clavis_migrator.backend import BackendError

# /proc/net/tcp's st column (include/net/tcp_states.h)
ESTABLISHED: Final = "01"
_CLOSING_IN_ORDER: Final = {
    "04": "FIN_WAIT1",
    "05": "FIN_WAIT2",
    "06": "TIME_WAIT",
    "08": "CLOSE_WAIT",
    "09": "LAST_ACK",
    "0B": "CLOSING",
}
_STATES: Final = {
    ESTABLISHED: "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "07": "CLOSE",
    "0A": "LISTEN", "0C": "NEW_SYN_RECV", **_CLOSING_IN_ORDER,
}  # fmt: skip
# two reads this far apart before the dump tell a lasting connection from an RPC
LASTING_S: Final = 0.5

Conn = tuple[str, str]  # ("ADDR:PORT", "ADDR:PORT"): local, remote


def _endpoint(hexed: str) -> str:
    """``0100007F:1F90`` -> ``127.0.0.1:8080``; 32 hex digits are IPv6 (4 host-order
    words)."""
    addr, _, port = hexed.partition(":")
    raw = bytes.fromhex(addr)
    # each 32-bit word is in the kernel's (little-endian here) byte order
    ordered = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(ordered)
    return f"[{ip}]:{int(port, 16)}" if ip.version == 6 else f"{ip}:{int(port, 16)}"


def parse_tcp(text: str) -> dict[Conn, str]:
    """The connections of a /proc/net/tcp or tcp6 text, with their st codes (pure)."""
    out: dict[Conn, str] = {}
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 4 or not cols[0].endswith(":"):
            continue
        try:
            out[(_endpoint(cols[1]), _endpoint(cols[2]))] = cols[3].upper()
        except ValueError:
            continue
    return out


def sockets(pid: int) -> dict[Conn, str]:
    """Every TCP socket of PID's network namespace, with its st code."""
    out: dict[Conn, str] = {}
    for name in ("tcp", "tcp6"):
        try:
            out.update(parse_tcp(Path(f"/proc/{pid}/net/{name}").read_text()))
        except FileNotFoundError:
            if name == "tcp6":
                continue  # a kernel without IPv6
            raise BackendError(f"cannot read /proc/{pid}/net/tcp: no such process") from None
        except OSError as exc:
            raise BackendError(f"cannot read /proc/{pid}/net/{name}: {exc.strerror}") from exc
    return out


def established(table: dict[Conn, str]) -> set[Conn]:
    return {c for c, st in table.items() if st == ESTABLISHED}


def not_back(want: list[Conn], table: dict[Conn, str]) -> list[str]:
    """The connections of ``want`` that the restored namespace lost, each with what it
    shows instead (pure); empty when all are established or closing in order."""
    lost = []
    for conn in want:
        st = table.get(conn)
        if st == ESTABLISHED or st in _CLOSING_IN_ORDER:
            continue
        seen = "gone" if st is None else _STATES.get(st, f"state {st}")
        lost.append(f"{conn[0]}->{conn[1]} {seen}")
    return lost


def closing(want: list[Conn], table: dict[Conn, str]) -> int:
    """How many of ``want`` their ends have closed since (in order)."""
    return sum(1 for c in want if table.get(c) in _CLOSING_IN_ORDER)


def slurmd_pid(answer: str) -> int | None:
    """The ``Slurmd PID`` of ``scontrol show slurmd``'s answer (pure); None without one."""
    for line in answer.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "Slurmd PID" and value.strip().isdigit():
            return int(value.strip())
    return None


def slurm_conf_of(cmdline: bytes) -> str:
    """The config file a slurmd was started with (``-f PATH``), or "" (pure)."""
    args = [a.decode(errors="replace") for a in cmdline.split(b"\0") if a]
    for i, a in enumerate(args):
        if a == "-f" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("-f") and len(a) > 2:
            return a[2:]
    return ""
