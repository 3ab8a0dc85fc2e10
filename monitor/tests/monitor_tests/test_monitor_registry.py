"""The registration socket served for real: the documented wire rules (docs/monitor.md)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clavis_monitor.registry import NodeJob, RegistrationServer, Registry

REG = {
    "op": "register",
    "node": "n3",
    "job_id": 42,
    "step_id": 0,
    "pids": [os.getpid()],
    "app": "lbm",
    "class_hint": "devil",
}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, Registry]]:
    path = tmp_path / "run" / "monitor.sock"
    reg = Registry()
    server = RegistrationServer(path, reg, timeout_s=0.5).start()
    try:
        yield path, reg
    finally:
        server.close()


def talk(path: Path, data: bytes, timeout: float = 3.0) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        s.sendall(data)
        out = b""
        while not out.endswith(b"\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            out += chunk
        return out


def test_register_then_deregister(served: tuple[Path, Registry]) -> None:
    path, reg = served
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert talk(path, json.dumps(REG).encode() + b"\n") == (
        b'{"ok":true,"error":null,"schema_version":2}\n'
    )
    # a second task of the same step adds its pid (idempotent, additive)
    again = dict(REG, pids=[1], class_hint="auto")
    assert talk(path, json.dumps(again).encode() + b"\n").startswith(b'{"ok":true')
    (step,) = reg.steps()
    assert step.pids == {os.getpid(), 1} and step.class_hint == "devil"
    assert reg.node_jobs()["n3"].job == "42"
    assert reg.node_jobs()["n3"].app is None  # no uid: no application key
    dereg = b'{"op":"deregister","node":"n3","job_id":42,"step_id":0}\n'
    assert talk(path, dereg).startswith(b'{"ok":true')
    assert reg.steps() == []
    assert talk(path, dereg).startswith(b'{"ok":true')  # unknown step: not an error


def test_the_application_key_comes_from_uid_and_job_name(served: tuple[Path, Registry]) -> None:
    path, reg = served
    batch = dict(REG, step_id=4294967291, uid=1000, app="slurm_script", job_name="stream.sh")
    assert talk(path, json.dumps(batch).encode() + b"\n").startswith(b'{"ok":true')
    assert reg.node_jobs()["n3"].app == "1000:stream.sh"  # not the batch step's slurm_script
    old = dict(REG, schema_version=1, job_id=43, uid=7, app="lbm")  # a v1 plugin: command name
    assert talk(path, json.dumps(old).encode() + b"\n").startswith(b'{"ok":true')
    assert reg.node_jobs()["n3"] == NodeJob("43", "7:lbm", "devil")


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        (b"not json\n", "Invalid JSON"),
        (b"[1]\n", "Input should be an object"),
        (json.dumps(dict(REG, job_id=0)).encode() + b"\n", "job_id: Input should be greater"),
        (json.dumps(dict(REG, surprise=1)).encode() + b"\n", "surprise: Extra inputs"),
        (b"x" * 70000 + b"\n", "exceeds 65536 bytes"),
    ],
)
def test_bad_requests_are_refused_with_the_reason(
    served: tuple[Path, Registry], line: bytes, needle: str
) -> None:
    path, reg = served
    reply = json.loads(talk(path, line))
    assert reply["ok"] is False and needle in reply["error"], reply
    assert reg.steps() == [] and reg.refused == 1


def test_a_slow_sender_is_cut_off_without_reply(served: tuple[Path, Registry]) -> None:
    path, _ = served
    t0 = time.monotonic()
    assert talk(path, b'{"op":', timeout=5) == b""  # no newline within 0.5 s: closed
    assert time.monotonic() - t0 < 3


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to another uid")
def test_a_non_root_peer_is_refused() -> None:
    # a directory the other uid can enter (pytest's tmp_path is root-only)
    where = Path(tempfile.mkdtemp(prefix="clavis-monitor-test-"))
    where.chmod(0o755)
    path = where / "monitor.sock"
    reg = Registry()
    server = RegistrationServer(path, reg).start()
    try:
        path.chmod(0o666)  # open it up so only the credential check stands in the way
        # The server refuses at accept, before reading: the client's send may meet a
        # closed socket (EPIPE), and the refusal is still waiting in its receive buffer.
        code = (
            "import socket,sys; s=socket.socket(socket.AF_UNIX); s.settimeout(3);"
            f"s.connect({str(path)!r})\n"
            "try:\n    s.sendall(b'{}\\n')\nexcept BrokenPipeError:\n    pass\n"
            "print(s.recv(4096).decode())"
        )
        out = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "/usr/bin/python3",
                "-c",
                code,
            ],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    finally:
        server.close()
        shutil.rmtree(where, ignore_errors=True)
    assert json.loads(out)["error"] == "peer uid 65534 is not root"
    assert not path.exists()
