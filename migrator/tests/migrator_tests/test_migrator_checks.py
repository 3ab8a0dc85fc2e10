"""The restore's checks beyond the process tree (checks.py): TCP connections read from
this process's own namespace over real loopback sockets, and slurmd's answer and command
line on captured text."""

from __future__ import annotations

import json
import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clavis_migrator import checks
from clavis_migrator.lxc import Expected, Proc, _slurmd

# /proc/net/tcp of a testbed node (r1h1c2): slurmd listening on 6818, and the TIME_WAIT
# an earlier `scontrol show slurmd` left
TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1AA2 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 64066 1
   1: 6601D50A:1AA2 6601D50A:AD10 06 00000000:00000000 03:0000176E 00000000     0        0 0 3
   2: 6601D50A:C350 0B01D50A:1F90 01 00000000:00000000 00:00000000 00000000     0        0 7 1
"""
TCP6 = """\
  sl  local_address                         remote_address                        st
   0: 00000000000000000000000001000000:1F90 00000000000000000000000001000000:A000 01 0
"""

# `scontrol show slurmd` inside a testbed node (Slurm 22.05.8)
SHOW_SLURMD = """\
Active Steps             = NONE
Actual CPUs              = 2
Hostname                 = r1h1c2
Last slurmctld msg time  = NONE
Slurmd PID               = 12
Slurmd Debug             = 3
Version                  = 22.05.8
"""


def test_parse_tcp_reads_addresses_ports_and_states() -> None:
    got = checks.parse_tcp(TCP)
    assert got[("0.0.0.0:6818", "0.0.0.0:0")] == "0A"
    assert got[("10.213.1.102:6818", "10.213.1.102:44304")] == "06"
    assert got[("10.213.1.102:50000", "10.213.1.11:8080")] == checks.ESTABLISHED
    six = checks.parse_tcp(TCP6)
    assert six == {("[::1]:8080", "[::1]:40960"): checks.ESTABLISHED}
    assert checks.parse_tcp("header only\n  garbage: zz:zz yy:yy 01\n") == {}


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket, socket.socket]]:
    srv = socket.create_server(("127.0.0.1", 0))
    cli = socket.create_connection(srv.getsockname(), timeout=5)
    acc, _ = srv.accept()
    yield srv, cli, acc
    for s in (srv, cli, acc):
        s.close()


def _conn(s: socket.socket) -> checks.Conn:
    (lh, lp), (rh, rp) = s.getsockname(), s.getpeername()
    return (f"{lh}:{lp}", f"{rh}:{rp}")


def _wait(pred: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.02)


def test_a_live_connection_is_established_in_this_namespace(pair) -> None:
    _, cli, acc = pair
    mine = checks.established(checks.sockets(os.getpid()))
    assert _conn(cli) in mine and _conn(acc) in mine
    assert checks.not_back([_conn(cli), _conn(acc)], checks.sockets(os.getpid())) == []


def test_a_connection_closed_in_order_counts_and_a_reset_one_does_not(pair) -> None:
    _, cli, acc = pair
    want = [_conn(cli), _conn(acc)]
    cli.shutdown(socket.SHUT_WR)  # a FIN: its ends close it in order
    _wait(lambda: checks.sockets(os.getpid()).get(_conn(acc)) == "08")
    table = checks.sockets(os.getpid())
    assert table[_conn(acc)] == "08"  # CLOSE_WAIT
    assert checks.not_back(want, table) == []
    assert checks.closing(want, table) == 2
    # an RST (SO_LINGER 0): the client's socket is gone and the server's closed
    acc.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn_acc = _conn(acc)
    acc.close()
    _wait(lambda: conn_acc not in checks.sockets(os.getpid()))
    lost = checks.not_back(want, checks.sockets(os.getpid()))
    assert f"{conn_acc[0]}->{conn_acc[1]} gone" in lost, lost


def test_a_connection_never_made_is_gone() -> None:
    lost = checks.not_back([("10.9.9.9:1", "10.9.9.8:2")], checks.sockets(os.getpid()))
    assert lost == ["10.9.9.9:1->10.9.9.8:2 gone"]


def test_sockets_of_no_process_is_an_error() -> None:
    with pytest.raises(checks.BackendError, match="cannot read"):
        checks.sockets(2**22 + 12345)


def test_slurmd_pid_and_config_from_its_answer_and_command_line() -> None:
    assert checks.slurmd_pid(SHOW_SLURMD) == 12
    assert checks.slurmd_pid("slurm_load_slurmd_status: Connection refused\n") is None
    assert checks.slurmd_pid("Slurmd PID = twelve\n") is None
    assert checks.slurm_conf_of(b"slurmd\0-f\0/run/x/slurm.conf\0") == "/run/x/slurm.conf"
    assert checks.slurm_conf_of(b"slurmd\0-f/etc/s.conf\0-D\0") == "/etc/s.conf"
    assert checks.slurm_conf_of(b"slurmd\0-D\0") == ""


def test_the_slurmd_is_inits_child_named_slurmd() -> None:
    procs = {
        1: Proc(9.0, 0, "cinit"),
        6: Proc(9.0, 1, "munged"),
        12: Proc(9.0, 1, "slurmd"),
        40: Proc(1.0, 12, "slurmd"),  # a forked child of it
    }
    assert _slurmd(procs) == (12, procs[12])
    assert _slurmd({1: Proc(9.0, 0, "init")}) is None


def test_expected_reads_this_agents_file_and_an_older_one(tmp_path: Path) -> None:
    f = tmp_path / "tree.json"
    f.write_text(json.dumps({"processes": 5, "long_lived": [1, 6], "stopped": [40],
                             "tcp": [["a:1", "b:2"]],
                             "slurmd": {"pid": 12, "conf": "/x.conf"}}))  # fmt: skip
    assert Expected.read(f) == Expected([1, 6], [40], [("a:1", "b:2")], 12, "/x.conf")
    f.write_text(json.dumps({"processes": 5, "long_lived": [1]}))
    assert Expected.read(f) == Expected([1], [], [], None, "")
