"""The pure C helpers of both plugins, built with AddressSanitizer and
UndefinedBehaviorSanitizer into a private build directory, fed the same garbage as the
plain tests: no out-of-bounds access, leak or undefined behaviour."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .minicluster import REPO

SAN_FLAGS = "-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"


@pytest.fixture(scope="module")
def san_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    build = tmp_path_factory.mktemp("san-build")
    cp = subprocess.run(
        ["make", "-C", str(REPO / "slurm-plugin"), f"BUILD={build}", f"CFLAGS={SAN_FLAGS}",
         f"{build}/clavis_advice_test", f"{build}/clavis_msg_test"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stdout + cp.stderr
    return build


def run(exe: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=99"}
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def test_advice_reader_on_garbage(san_build: Path, tmp_path: Path) -> None:
    drv = san_build / "clavis_advice_test"
    f = tmp_path / "advice.json"
    samples = [
        b"",
        b"[" * 5000,
        b'{"a":"\\ud83d\\ude00","b":[1,2.5e-3,-0,true,false,null]}',
        b'{"nodes":[{"node":"n1","host":"h","rack":"r","contention":"ok","node_class":"devil"},'
        b'{"node":"n1"}],"generated":"2026-11-22T19:45:05Z","valid_s":1}',
        b'{"schema_version":1,"kind":"clavis.advice","generated":"2026-11-22T19:45:05Z",'
        b'"valid_s":180,"nodes":[{"node":"n2","host":"h","rack":"r","contention":"ok",'
        b'"node_class":"devil"},{"node":"n1","host":"h","rack":"r","contention":"ok",'
        b'"node_class":"unknown"}]}',
        b'{"schema_version":2,"kind":"clavis.advice","generated":"2026-11-22T19:45:05Z",'
        b'"valid_s":180,"nodes":[],"apps":[{"app":"1000:b","app_class":"devil","jobs_seen":1},'
        b'{"app":"0:a","app_class":"turtle","jobs_seen":2},{"app":"1000:b","app_class":'
        b'"devil","jobs_seen":1}]}',
        b'{"schema_version":2,"generated":"2026-11-22T19:45:05Z","valid_s":1,"nodes":[],'
        b'"apps":[{"app":"0:a","app_class":"devil","jobs_seen":1},{"app":"1:"}]}',
        b'{"schema_version":2,"generated":"2026-11-22T19:45:05Z","valid_s":1,"nodes":[],"apps":[]}',
        b'"\\u12',
        b"1e",
        *(os.urandom(n) for n in (1, 7, 100, 5000)),
    ]
    for data in samples:
        f.write_bytes(data)
        for args in (("parse", str(f), "0"), ("load", str(f), "0", "100000", "3")):
            cp = run(drv, *args)
            assert cp.returncode == 0, (data[:40], cp.stderr[-3000:])
    for text in ("2026-11-22T19:45:05.123456789+05:30", "9999-99-99T99:99:99Z", "x" * 40):
        assert run(drv, "rfc3339", text).returncode == 0
    for uid, name in (("0", "x" * 240), ("4294967295", "é" * 120), ("1", ""), ("9" * 30, "a")):
        assert run(drv, "key", uid, name).returncode == 0


def test_request_builder_on_garbage(san_build: Path, tmp_path: Path) -> None:
    drv = san_build / "clavis_msg_test"
    cg = tmp_path / "cgroup"
    cg.write_bytes(
        b"12:memory:/slurm_n/uid_0/job_9/step_0/task_0\n0::/job_9/step_batch\n"
        + os.urandom(3000)
        + b"\n3:a,b:/job_9/step_1\n::\n:\n9"
    )
    for args in (
        ("register", "n1", "9", "0", "0", "/bin/app", "devil", "1,2,3", str(cg)),
        ("register", "n" * 200, "9", "0", "-", "-", "auto", "1"),
        ("register", "n1", "9", "0", "-", "-", "auto", ",".join(map(str, range(1, 5000)))),
        ("deregister", "n1", "9", "0"),
        ("cgroups", "9", str(cg)),
        ("app", "/a/b/\x01\x7f" + "x" * 300),
        ("exchange", str(tmp_path / "absent.sock"), "50"),
    ):
        cp = run(drv, *args)
        assert cp.returncode in (0, 3), (args[:3], cp.stderr[-3000:])
