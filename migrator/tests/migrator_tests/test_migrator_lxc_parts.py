"""The LXC backend's pieces that need no container: sizes from a config, process trees.
The backend itself runs on the testbed (tests/integration/test_migrator_lxc.py)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from clavis_migrator.backend import Size
from clavis_migrator.lxc import Proc, _config_size, config_cpuset, must_come_back, tree


def test_size_from_an_lxc_config(tmp_path: Path) -> None:
    conf = tmp_path / "config"
    conf.write_text(
        "lxc.uts.name = n1\nlxc.cgroup.cpuset.cpus = 0-3,6,8-9\n"
        "lxc.cgroup.memory.limit_in_bytes = 1073741824\n"
    )
    assert _config_size(conf) == Size(7, 2**30)
    assert config_cpuset(conf) == "0-3,6,8-9"
    conf.write_text("lxc.cgroup2.cpuset.cpus = 2\nlxc.cgroup2.memory.max = max\n")
    assert _config_size(conf) == Size(1, 0)
    conf.write_text("lxc.uts.name = n2\n")
    assert _config_size(conf) == Size(1, 0)
    assert config_cpuset(conf) == ""


def test_tree_lists_live_processes_of_a_pid_namespace_by_their_pid_in_it() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.2)
        found = tree(os.getpid())  # this test's own pid namespace
        assert child.pid in found and os.getpid() in found
        assert found[os.getpid()].age_s >= found[child.pid].age_s >= 0
        assert found[child.pid].ppid == os.getpid()
    finally:
        child.kill()
        child.wait(timeout=10)
    assert child.pid not in tree(os.getpid())
    assert tree(2**22 + 12345) == {}  # no such process


def test_what_must_come_back_after_a_restore() -> None:
    procs = {
        1: Proc(0.5, 0),  # init of a container restored a moment ago
        7: Proc(0.4, 1),  # its daemon
        9: Proc(0.3, 7),  # a young grandchild: may end meanwhile
        12: Proc(30.0, 7),  # an old one: must be back
    }
    assert must_come_back(procs) == [1, 7, 12]
