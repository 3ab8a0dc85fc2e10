"""up / down lifecycle: idempotent up, repair after a failure, nothing left behind.

These tests build testbeds of their own, so conftest.py runs them before the shared
`testbed` fixture exists.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import tb

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not tb.is_root(), reason="the testbed needs root"),
]

SMALL = ["--racks", "2", "--hosts-per-rack", "1", "--containers-per-host", "1"]


@pytest.fixture
def clean_machine() -> Iterator[dict[str, list[str]]]:
    st = tb.status()
    assert not tb.RUN_DIR.exists(), f"a testbed is already up; run `clavis-testbed down`: {st}"
    before = tb.snapshot()
    try:
        yield before
    finally:
        tb.tb("down", check=False)


def _state_pids() -> list[int]:
    data = json.loads((tb.RUN_DIR / "state.json").read_text())
    return [int(p["pid"]) for p in data["processes"]]


def _container_pids() -> list[int]:
    """Every process in our containers' cgroups (init, slurmd, munged, ...)."""
    pids = []
    for f in Path("/sys/fs/cgroup/pids").glob("lxc.payload.*/cgroup.procs"):
        pids += [int(x) for x in f.read_text().split()]
    return pids


def _ours_running() -> list[str]:
    """Command lines of live processes that name the testbed's run directory."""
    found = []
    for pid in tb.live_pids([int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]):
        try:
            argv = (Path(f"/proc/{pid}/cmdline").read_bytes()).replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(tb.RUN_DIR) + "/" in argv:
            found.append(argv)
    return found


def test_bad_input_is_refused_and_builds_nothing(clean_machine: dict[str, list[str]]) -> None:
    cp = tb.tb("up", "--racks", "0", check=False)
    assert cp.returncode == 2
    assert "racks: must be in [1, 20], got 0" in cp.stderr
    cp = tb.tb("up", "--topology", "/nonexistent/topo.toml", check=False)
    assert cp.returncode == 2
    assert "/nonexistent/topo.toml" in cp.stderr
    cp = tb.tb("restore", "no-such-container", check=False)
    assert cp.returncode != 0
    assert tb.left_behind(clean_machine) == {}


def test_up_is_idempotent_and_down_leaves_nothing(clean_machine: dict[str, list[str]]) -> None:
    tb.tb("up", *SMALL)
    st = tb.status()
    assert st["up"], st["problems"]
    pids = _state_pids()
    whats = {p["what"] for p in st["processes"]}
    assert {"mariadbd", "slurmdbd", "slurmctld", "munged-head"} <= whats, whats
    cpids = _container_pids()
    assert len(cpids) >= 2 * 3  # init, munged, slurmd per container at least
    during = tb.snapshot()
    assert set(during["netns"]) - set(clean_machine["netns"]) == {
        "ctb-core", "ctb-r1", "ctb-r2", "ctb-r1h1", "ctb-r2h1", "ctb-mgmt",
    }  # fmt: skip
    # no interface and no rule is ever created in the root namespace
    assert "links" not in tb.left_behind(clean_machine)
    assert "iptables" not in tb.left_behind(clean_machine)
    assert any("lxc.payload.r1h1c1" in d for d in during["cgroups"])

    again = tb.tb("up", *SMALL)
    assert "already up" in again.stderr
    assert _state_pids() == pids  # nothing was restarted

    other = tb.tb("up", "--racks", "3", check=False)
    assert other.returncode == 2 and "another topology" in other.stderr

    tb.tb("down")
    deadline = time.monotonic() + 10
    while tb.live_pids(pids + cpids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert tb.live_pids(pids + cpids) == []
    assert tb.left_behind(clean_machine) == {}
    assert tb.tb("status", check=False).returncode == 3


def test_second_up_repairs_a_broken_testbed(clean_machine: dict[str, list[str]]) -> None:
    tb.tb("up", *SMALL)
    st = tb.status()
    victim = next(p for p in st["processes"] if p["what"].startswith("ipmi_sim"))
    os.kill(victim["pid"], signal.SIGKILL)
    time.sleep(0.2)
    broken = tb.status()
    assert not broken["up"]
    assert any(victim["what"] in p for p in broken["problems"])
    tb.tb("up", *SMALL)
    assert tb.status()["up"]
    tb.tb("down")
    assert tb.left_behind(clean_machine) == {}


def test_up_after_a_failed_up(clean_machine: dict[str, list[str]]) -> None:
    # A file where the head's munge directory goes: up fails once the network, the
    # BMCs and powerd are built, must remove them, and a later up must work.
    tb.RUN_DIR.mkdir(parents=True)
    (tb.RUN_DIR / "munge").write_text("in the way\n")
    cp = tb.tb("up", *SMALL, check=False)
    assert cp.returncode == 1, cp.stderr
    assert "up failed" in cp.stderr and "munge" in cp.stderr, cp.stderr
    assert tb.left_behind(clean_machine) == {}
    assert _ours_running() == []
    tb.tb("up", *SMALL)
    assert tb.status()["up"]
    tb.tb("down")
    assert tb.left_behind(clean_machine) == {}


def test_no_node_starts_once_down_has_begun(clean_machine: dict[str, list[str]]) -> None:
    # Slurm's power saving can resume a node while `down` runs (slurmctld -> clavisd ->
    # node-power start): once down has begun, no container may start behind it
    tb.tb("up", *SMALL)
    assert tb.tb("node-power", "stop", "r1h1c1").returncode == 0
    (tb.RUN_DIR / "going-down").touch()  # what down writes before it stops anything
    cp = tb.tb("node-power", "start", "r1h1c1", "r1h1", check=False)
    assert cp.returncode == 1, cp.stderr
    assert "r1h1c1 not started: the testbed is going down" in cp.stderr, cp.stderr
    procs = Path("/sys/fs/cgroup/pids/lxc.payload.r1h1c1/cgroup.procs")
    assert not procs.exists() or procs.read_text().split() == []
    tb.tb("down")
    assert tb.left_behind(clean_machine) == {}
