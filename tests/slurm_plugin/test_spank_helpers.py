"""spank_clavis.so's helpers, driven through build/clavis_msg_test: the JSON lines it
builds are valid registration requests of contract v2 (checked with the contract's own
model), garbage is refused before it reaches the monitor, and one exchange with the
monitor's socket never outlasts its budget, whatever the listener does."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clavis_contracts.registration import (
    DeregisterStep,
    RegisterStep,
    RegistrationRequest,
)
from clavis_monitor.registry import RegistrationServer, Registry

REPO = Path(__file__).resolve().parents[2]
PLUGIN_DIR = REPO / "slurm-plugin"
DRIVER = PLUGIN_DIR / "build" / "clavis_msg_test"
BATCH_STEP = 4294967291

# /proc/PID/cgroup of a task of job 42 step 0 (cgroup v1 with the slurm_%n layout of
# --enable-multiple-slurmd), of a batch step, of cgroup v2, and lines that are not it.
PROC_CGROUP = """\
12:memory:/slurm_n3/uid_1000/job_42/step_0/task_0
11:cpu,cpuacct:/slurm_n3/uid_1000/job_42/step_0
10:cpuset:/slurm_n3/uid_1000/job_42/step_batch
9:freezer:/slurm_n3/uid_1000/job_421/step_0
8:devices:/slurm_n3/uid_1000/job_42
7:blkio:/
1:name=systemd:/system.slice/slurmd.service
2:name=other:/slurm_n3/uid_1000/job_42/step_0
0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0
"""


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    cp = subprocess.run(
        [str(DRIVER), *args], capture_output=True, text=True, timeout=30, check=False
    )
    if check:
        assert cp.returncode == 0, f"{args} -> {cp.returncode}: {cp.stderr}"
    return cp


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    """The plugin and its driver, built as `make test` builds them (-Werror)."""
    cp = subprocess.run(
        ["make", "-C", str(PLUGIN_DIR)], capture_output=True, text=True, timeout=300, check=False
    )
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert (PLUGIN_DIR / "build" / "spank_clavis.so").is_file()


def test_make_builds_with_warnings_as_errors() -> None:
    cp = subprocess.run(
        ["make", "-C", str(PLUGIN_DIR), "-n", "-B", "build/spank_clavis.so"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert "-Wall" in cp.stdout and "-Wextra" in cp.stdout and "-Werror" in cp.stdout
    syms = subprocess.run(
        ["nm", "-D", "--defined-only", str(PLUGIN_DIR / "build" / "spank_clavis.so")],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    for sym in ("plugin_name", "plugin_type", "plugin_version", "slurm_spank_init",
                "slurm_spank_task_post_fork", "slurm_spank_exit"):  # fmt: skip
        assert f" {sym}\n" in syms, sym


def test_register_line_is_a_contract_request(tmp_path: Path) -> None:
    cg = tmp_path / "cgroup"
    cg.write_text(PROC_CGROUP)
    out = run("register", "r1h2c1", "42", "0", "1000", "lbm", "devil", "81234,81235", str(cg))
    line = out.stdout
    assert line.endswith("\n") and line.count("\n") == 1
    msg = RegistrationRequest.model_validate_json(line).root
    assert isinstance(msg, RegisterStep)
    assert (msg.node, msg.job_id, msg.step_id) == ("r1h2c1", 42, 0)
    assert msg.pids == [81234, 81235]
    assert msg.uid == 1000 and msg.app == "lbm" and msg.class_hint == "devil"
    assert msg.cgroups == [
        "/sys/fs/cgroup/memory/slurm_n3/uid_1000/job_42/step_0",
        "/sys/fs/cgroup/cpu,cpuacct/slurm_n3/uid_1000/job_42/step_0",
        "/sys/fs/cgroup/cpuset/slurm_n3/uid_1000/job_42/step_batch",
        "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_42/step_0",
    ]


def test_unknown_uid_app_and_batch_step() -> None:
    line = run("register", "n1", "7", str(BATCH_STEP), "-", "-", "auto", "1").stdout
    msg = RegistrationRequest.model_validate_json(line).root
    assert isinstance(msg, RegisterStep)
    assert msg.step_id == BATCH_STEP and msg.uid is None and msg.app is None
    assert msg.cgroups == []


def test_deregister_line_is_a_contract_request() -> None:
    line = run("deregister", "r2h2c2", "4294967295", "4294967292").stdout
    msg = RegistrationRequest.model_validate_json(line).root
    assert isinstance(msg, DeregisterStep)
    assert (msg.node, msg.job_id, msg.step_id) == ("r2h2c2", 4294967295, 4294967292)
    # the contract's key order is free, but ok-first matters only for replies
    assert line.startswith('{"schema_version":2,"op":"deregister"')


@pytest.mark.parametrize(
    "args",
    [
        ("bad node", "1", "0", "-", "-", "auto", "1"),
        ("-n1", "1", "0", "-", "-", "auto", "1"),
        ("n" * 129, "1", "0", "-", "-", "auto", "1"),
        ("n1", "0", "0", "-", "-", "auto", "1"),  # job id 0
        ("n1", "1", "0", "-", "-", "angel", "1"),  # class hint
        ("n1", "1", "0", "-", "-", "auto", "0"),  # pid 0
        ("n1", "1", "0", "-", "-", "auto", "4194305"),  # above pid_max
        ("n1", "1", "0", "-", "-", "auto", "5,6,5"),  # a pid twice
        ("n1", "1", "0", "4294967296", "-", "auto", "1"),  # uid out of range
        ("n1", "1", "0", "-", "", "auto", "1"),  # empty app
        ("n1", "1", "0", "-", "a" * 257, "auto", "1"),
        ("n1", "1", "0", "-", "l\x01bm", "auto", "1"),
    ],
)
def test_garbage_is_refused_before_the_monitor(args: tuple[str, ...]) -> None:
    cp = run("register", *args, check=False)
    assert cp.returncode == 3, cp.stdout
    assert cp.stdout == ""


def test_too_many_pids_refused_and_4096_accepted() -> None:
    pids = ",".join(str(p) for p in range(1, 4098))
    assert run("register", "n1", "1", "0", "-", "-", "auto", pids, check=False).returncode == 3
    pids = ",".join(str(p) for p in range(1, 4097))
    msg = RegistrationRequest.model_validate_json(
        run("register", "n1", "1", "0", "-", "-", "auto", pids).stdout
    ).root
    assert isinstance(msg, RegisterStep) and len(msg.pids) == 4096


def test_line_over_the_contract_limit_is_refused(tmp_path: Path) -> None:
    # 32 hierarchies with 3000-byte paths: 96 kB, beyond the 65536-byte line limit
    deep = "/".join(["d" * 99] * 29)
    cg = tmp_path / "cgroup"
    cg.write_text(
        "".join(f"{i}:ctl{i}:/{deep}/job_5/step_0\n" for i in range(1, 33)),
    )
    cp = run("register", "n1", "5", "0", "-", "-", "auto", "1", str(cg), check=False)
    assert cp.returncode == 3
    assert "too long" in cp.stderr  # EMSGSIZE


def test_cgroups_of_garbage_files(tmp_path: Path) -> None:
    cg = tmp_path / "cgroup"
    cases = {
        "": [],
        "no colons at all\n\n:::\n": [],
        "3:memory:relative/job_5/step_0\n": [],
        "3:memory:/a/../job_5/step_0\n": [],
        "3:memory:/job_5/step_\n": [],
        "3:memory:/job_5/step_0\x01x\n": [],
        "3:memory:/job_5//step_0\n": [],  # not normalised: the kernel never writes it
        "3:memory:/job_5/step_0\n4:memory:/job_5/step_0/task_1\n": [
            "/sys/fs/cgroup/memory/job_5/step_0"
        ],
    }
    for text, want in cases.items():
        cg.write_text(text)
        got = run("cgroups", "5", str(cg)).stdout.splitlines()
        assert got == want, (text, got)
    cg.write_bytes(os.urandom(200_000))
    for line in run("cgroups", "5", str(cg)).stdout.splitlines():
        assert line.startswith("/sys/fs/cgroup/")


def test_job_name_goes_on_the_line_for_the_application_key() -> None:
    name = 'stream \u00fc "x"\\\t\x7f\U0001f600'  # quotes, backslash, control, non-ASCII
    line = run("register", "n1", "7", str(BATCH_STEP), "1000", "slurm_script", "auto", "1", "-",
               name).stdout  # fmt: skip
    msg = RegistrationRequest.model_validate_json(line).root
    assert isinstance(msg, RegisterStep) and msg.schema_version == 2
    assert msg.job_name == name and msg.app == "slurm_script"
    assert msg.application() == f"1000:{name}"
    long = run("register", "n1", "7", "0", "1000", "-", "auto", "1", "-", "\u00e9" * 512).stdout
    assert RegistrationRequest.model_validate_json(long).root.job_name == "\u00e9" * 512  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "name",
    [
        b"\xff",
        b"ok\xc3",
        b"\xc0\xaf",
        b"\xe0\x80\xaf",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\x80x",
        b"x" * 1025,
    ],
)
def test_job_names_the_monitor_would_refuse_are_refused(name: bytes) -> None:
    args = [b"register", b"n1", b"7", b"0", b"1000", b"-", b"auto", b"1", b"-", name]
    cp = subprocess.run([bytes(DRIVER), *args], capture_output=True, timeout=30, check=False)
    assert cp.returncode == 3 and cp.stdout == b""


def test_app_key() -> None:
    assert run("app", "/usr/bin/lbm").stdout == "lbm\n"
    assert run("app", "soplex").stdout == "soplex\n"
    assert run("app", "/a/b/m\x01\x7fc").stdout == "m__c\n"
    assert len(run("app", "x" * 1000).stdout.strip()) == 256
    assert run("app", "/usr/bin/", check=False).returncode == 3


# ------------------------------------------------------------------ the exchange


def exchange(path: Path, budget_ms: int = 200) -> tuple[str, float]:
    t0 = time.monotonic()
    out = run("exchange", str(path), str(budget_ms)).stdout.strip()
    return out, time.monotonic() - t0


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # sun_path holds 108 bytes: keep socket paths short
    with tempfile.TemporaryDirectory(prefix="clavis-spank-") as d:
        yield Path(d)


@pytest.fixture
def monitor(sock_dir: Path) -> Iterator[tuple[Path, Registry]]:
    path = sock_dir / "monitor.sock"
    reg = Registry()
    server = RegistrationServer(path, reg, timeout_s=1.0).start()
    try:
        yield path, reg
    finally:
        server.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="the monitor takes requests from root only")
def test_exchange_with_the_real_registry_server(monitor: tuple[Path, Registry]) -> None:
    path, reg = monitor
    out, _ = exchange(path)
    assert out.startswith("ok "), out
    assert reg.accepted == 1 and reg.refused == 0


def test_exchange_without_a_socket(sock_dir: Path) -> None:
    out, took = exchange(sock_dir / "absent.sock")
    assert out == "failed connect No such file or directory"
    assert took < 1.0


def test_exchange_with_a_listener_that_never_answers(sock_dir: Path) -> None:
    path = sock_dir / "mute.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
        srv.bind(str(path))
        srv.listen(8)  # never accepts: connect and send succeed, no reply comes
        out, took = exchange(path, budget_ms=200)
    assert out == "failed timeout -", out
    assert 0.19 < took < 1.0, took


def test_exchange_with_a_full_backlog(sock_dir: Path) -> None:
    path = sock_dir / "full.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
        srv.bind(str(path))
        srv.listen(0)
        fillers = []
        try:
            for _ in range(4):  # fill the backlog of a listener that never accepts
                c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                c.setblocking(False)
                try:
                    c.connect(str(path))
                except BlockingIOError:
                    c.close()
                    break
                fillers.append(c)
            out, took = exchange(path, budget_ms=200)
        finally:
            for c in fillers:
                c.close()
    assert out.startswith("failed monitor busy"), out
    assert took < 1.0


def test_exchange_with_a_refusing_and_a_garbage_listener(sock_dir: Path) -> None:
    for reply, want in (
        (b'{"ok":false,"error":"nope","schema_version":1}\n', "refused refused -"),
        (b"\x00garbage without newline", "failed reply not terminated -"),
        (b"", "failed closed without reply -"),
        (b"x" * 5000 + b"\n", "failed reply too long -"),
    ):
        path = sock_dir / "odd.sock"
        path.unlink(missing_ok=True)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
            srv.bind(str(path))
            srv.listen(1)

            def answer(s: socket.socket = srv, data: bytes = reply) -> None:
                conn, _ = s.accept()
                with conn:
                    conn.recv(65536)
                    conn.sendall(data)

            t = threading.Thread(target=answer)
            t.start()
            out, took = exchange(path)
            t.join(5)
        assert out == want, (reply[:20], out)
        assert took < 1.0
