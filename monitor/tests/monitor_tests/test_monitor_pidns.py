"""Registrations from another pid namespace: the pids a sender sees in its own namespace
are translated into the monitor's (peer credentials + NSpid), with real namespaces made
by unshare(1) around a real sender process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clavis_monitor.pidns import parse_nspid
from clavis_monitor.registry import RegistrationServer, Registry

# Runs inside the new namespaces: start a recognisable sleep, register it (and one pid
# that is no process there) with the pids this namespace gives them, print the reply.
SENDER = r"""
import json, socket, subprocess, sys
sock, tag, cgroups = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
child = subprocess.Popen(["sleep", tag])
pids = [child.pid, 4000] if sys.argv[4] == "with-child" else [4000]
req = {"op": "register", "node": "n1", "job_id": 9, "step_id": 0, "pids": pids,
       "cgroups": cgroups, "uid": 0, "job_name": "ns.sh"}
with socket.socket(socket.AF_UNIX) as s:
    s.settimeout(5)
    s.connect(sock)
    s.sendall(json.dumps(req).encode() + b"\n")
    reply = s.makefile("rb").readline().decode()
print(json.dumps({"ns_pid": child.pid, "reply": reply}), flush=True)
sys.stdin.read()  # hold the sleep until the test closes stdin
child.kill()
"""


def test_parse_nspid() -> None:
    assert parse_nspid("Name:\tsleep\nNSpid:\t81234\t57\t2\nNSsid:\t1\n") == (81234, 57, 2)
    assert parse_nspid("NSpid:\t7\n") == (7,)
    assert parse_nspid("Name:\tx\n") == ()  # kernels before 4.1
    assert parse_nspid("NSpid:\tx y\n") == ()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, Registry]]:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) (pid namespaces)")
    path = tmp_path / "monitor.sock"
    reg = Registry()
    server = RegistrationServer(path, reg, timeout_s=2.0).start()
    try:
        yield path, reg
    finally:
        server.close()


def _pids_of(argv: list[str]) -> list[int]:
    want = "\0".join(argv).encode() + b"\0"
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "cmdline").read_bytes() == want:
                    found.append(int(d.name))
            except OSError:
                continue
    return found


def _send(
    sock: Path, tag: str, cgroups: list[str], mode: str, *ns: str
) -> tuple[dict[str, Any], subprocess.Popen[str]]:
    proc = subprocess.Popen(
        ["unshare", *ns, "--fork", sys.executable, "-c", SENDER, str(sock), tag,
         json.dumps(cgroups), mode],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "the sender printed nothing"
    return json.loads(line), proc


def _end(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=10)


def test_pids_from_a_child_pid_namespace_are_the_monitors(
    served: tuple[Path, Registry],
) -> None:
    sock, reg = served
    tag = f"61.{os.getpid()}"
    cg = ["/sys/fs/cgroup/memory/slurm/job_9/step_0"]
    got, proc = _send(sock, tag, cg, "with-child", "--pid")
    try:
        assert got["reply"].startswith('{"ok":true'), got
        (host_pid,) = _pids_of(["sleep", tag])
        assert host_pid != got["ns_pid"]  # the two views really differ
        (step,) = reg.steps()
        assert step.pids == {host_pid}  # translated; the pid 4000 of nothing left out
        assert step.cgroups == set(cg)  # same cgroup namespace: the paths are the monitor's
        assert step.app == "0:ns.sh"
        # the prune of a rescan keeps it while the process lives
        assert reg.prune({"n1"}) == 0 and len(reg.steps()) == 1
    finally:
        _end(proc)
    deadline = time.monotonic() + 10
    while _pids_of(["sleep", tag]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert reg.prune({"n1"}) == 1


def test_cgroup_paths_of_another_cgroup_namespace_are_dropped(
    served: tuple[Path, Registry],
) -> None:
    sock, reg = served
    tag = f"62.{os.getpid()}"
    got, proc = _send(sock, tag, ["/sys/fs/cgroup/memory/job_9/step_0"], "with-child",
                      "--pid", "--cgroup")  # fmt: skip
    try:
        assert got["reply"].startswith('{"ok":true'), got
        (step,) = reg.steps()
        assert step.pids == set(_pids_of(["sleep", tag])) and step.cgroups == set()
    finally:
        _end(proc)


def test_pids_that_are_no_process_of_the_sender_are_refused(
    served: tuple[Path, Registry],
) -> None:
    sock, reg = served
    got, proc = _send(sock, f"63.{os.getpid()}", [], "alone", "--pid")
    _end(proc)
    reply = json.loads(got["reply"])
    assert reply["ok"] is False and "no pid of [4000]" in reply["error"]
    assert reg.steps() == [] and reg.refused == 1
