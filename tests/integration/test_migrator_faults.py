"""Issue 14's fault matrix on the testbed, each case run RUNS times (3 in the suite;
bench/migration/faults.py runs them 10 times): a node container with a running batch job
is being moved from r1h1 to r1h2 by two real agents (LXC, CRIU 4.2.1) when something
breaks. Every time the container ends running exactly once (on the source, or on the
target after the commit), the job finishes with every line written once and one
uninterrupted run in accounting, no image is left on either host, and the agents'
records say what happened."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from . import tb
from .migrators import (
    Agents,
    count_lines,
    job_ends_well,
    lxc_state,
    no_images_left,
    one_completed_run,
    running_on,
    send_home,
    start_job,
    step,
    wait_until,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not tb.is_root(), reason="the testbed needs root"),
]

NODE = "r1h1c2"  # on r1h1, moved to r1h2 (same rack)
RUNS = int(os.environ.get("CLAVIS_FAULT_RUNS", "3"))
# 3 cores each: r1h2 with its own 2 nodes takes one more
CORES = 3


def _ends_on_source(
    a: Agents, testbed: dict[str, Any], doc: dict[str, Any], deadline_s: float = 300
) -> None:
    assert doc["state"] == "rolled_back", a.explain(doc, "r1h1", "r1h2")
    assert "rolled back: restored on r1h1" in doc["message"], doc
    assert running_on(testbed, NODE) == ["r1h1"]
    # the same step id again: its status, never a second run
    again = step(testbed, (1, 0), NODE, "r1h1", "r1h2", deadline_s=deadline_s)
    assert a.send(again)["state"] == "rolled_back"


@pytest.mark.parametrize("run", range(RUNS))
def test_target_agent_killed_mid_transfer(
    testbed: dict[str, Any], tmp_path: Path, run: int
) -> None:
    """kill -9 of the target's agent when the first image chunk arrives: the source's
    transfer fails, it restores the container at home; the target, restarted, drops the
    partial images."""
    a = Agents(testbed, tmp_path, ["r1h1"], cores=CORES)
    try:
        a.start("r1h2", CORES, pause_at="target-receiving")
        job, counter = start_job(testbed, NODE, 80)
        a.send(step(testbed, (1, 0), NODE, "r1h1", "r1h2"))
        assert wait_until(lambda: "pause point target-receiving reached" in a.log("r1h2"), 60)
        a.kill("r1h2")
        doc = a.wait("r1h1", "1:0")
        assert "transfer to r1h2 failed 3 times" in doc["message"], doc
        _ends_on_source(a, testbed, doc)
        assert any(p.is_file() for p in (a.state_dir("r1h2") / "incoming").rglob("*"))
        a.start("r1h2", CORES)  # a restarted target drops what it never restored
        no_images_left(a, ["r1h1", "r1h2"])
        job_ends_well(job, NODE, counter, 80)
    finally:
        a.stop()
        send_home(testbed, tmp_path, NODE, "r1h1")


@pytest.mark.parametrize("run", range(RUNS))
def test_target_disk_full(testbed: dict[str, Any], tmp_path: Path, run: int) -> None:
    """The target cannot take the images (a 256 KiB tmpfs over its incoming directory):
    three transfers fail, the container is restored on its source."""
    a = Agents(testbed, tmp_path, ["r1h1", "r1h2"], cores=CORES)
    incoming = a.state_dir("r1h2") / "incoming"
    try:
        job, counter = start_job(testbed, NODE, 60)
        tb.run(["mount", "-t", "tmpfs", "-o", "size=256k", "clavis-test-full", str(incoming)])
        try:
            a.send(step(testbed, (1, 0), NODE, "r1h1", "r1h2"))
            doc = a.wait("r1h1", "1:0")
        finally:
            subprocess.run(["umount", str(incoming)], check=False, timeout=30)
        assert "No space left on device" in doc["message"], doc
        assert "failed 3 times" in doc["message"], doc
        _ends_on_source(a, testbed, doc)
        no_images_left(a, ["r1h1", "r1h2"])
        job_ends_well(job, NODE, counter, 60)
    finally:
        a.stop()
        send_home(testbed, tmp_path, NODE, "r1h1")


@pytest.mark.parametrize("run", range(RUNS))
def test_source_agent_killed_after_the_dump(
    testbed: dict[str, Any], tmp_path: Path, run: int
) -> None:
    """kill -9 of the source's agent once the container is dumped: the container is down
    until the agent restarts, which restores it on the source; the target keeps nothing."""
    a = Agents(testbed, tmp_path, ["r1h2"], cores=CORES)
    try:
        a.start("r1h1", CORES, pause_at="after-checkpoint")
        job, counter = start_job(testbed, NODE, 80)
        a.send(step(testbed, (1, 0), NODE, "r1h1", "r1h2"))
        assert wait_until(lambda: "pause point after-checkpoint reached" in a.log("r1h1"), 60)
        a.kill("r1h1")
        assert running_on(testbed, NODE) == []
        a.start("r1h1", CORES)
        doc = a.wait("r1h1", "1:0")
        assert "agent restarted during phase transfer" in doc["message"], doc
        _ends_on_source(a, testbed, doc)
        no_images_left(a, ["r1h1", "r1h2"])
        job_ends_well(job, NODE, counter, 80)
    finally:
        a.stop()
        send_home(testbed, tmp_path, NODE, "r1h1")


def _link(state: str) -> None:
    """r1h2's cable at the rack switch: its port in the rack's netns (ctb-r1)."""
    tb.run(["ip", "-n", "ctb-r1", "link", "set", "h-r1h2", state])


def _back_in_service() -> None:
    """A cut that outlasts SlurmdTimeout leaves r1h2's nodes DOWN, and slurmctld does not
    ping a down node again: resume them, as an admin would, for the tests after this."""
    left = tb.recover_nodes()
    if left:
        print(f"nodes still out of service after the link came back: {left}", file=sys.stderr)


@pytest.mark.parametrize("run", range(RUNS))
def test_link_between_the_hosts_cut_mid_transfer(
    testbed: dict[str, Any], tmp_path: Path, run: int
) -> None:
    """r1h2's link is cut while the first image chunk is on its way (the target holds it
    2 s, pause point target-receiving:2) and comes back once the source has given that
    transfer up (its 5 s call timeout): the source starts the transfer over from nothing
    and the move completes; the target ran nothing half-received."""
    a = Agents(testbed, tmp_path, [], cores=CORES)
    try:
        a.start("r1h1", CORES, peer_timeout_s=5.0)
        a.start("r1h2", CORES, pause_at="target-receiving:2")
        job, counter = start_job(testbed, NODE, 100)
        a.send(step(testbed, (1, 0), NODE, "r1h1", "r1h2"))
        assert wait_until(lambda: "pause point target-receiving reached" in a.log("r1h2"), 60)
        _link("down")
        try:
            assert wait_until(lambda: "transfer attempt 1" in a.log("r1h1"), 30), a.log("r1h1")
        finally:
            _link("up")
        doc = a.wait("r1h1", "1:0")
        assert doc["state"] == "done", a.explain(doc, "r1h1", "r1h2")
        assert "(restarted after attempt 1:" in doc["message"], doc
        assert "committed: r1h1c2 runs on r1h2" in doc["message"], doc
        assert running_on(testbed, NODE) == ["r1h2"]
        no_images_left(a, ["r1h1", "r1h2"])
        job_ends_well(job, NODE, counter, 100)
    finally:
        _link("up")
        a.stop()
        send_home(testbed, tmp_path, NODE, "r1h1")
        _back_in_service()


@pytest.mark.parametrize("run", range(RUNS))
def test_link_cut_until_the_source_gives_up(
    testbed: dict[str, Any], tmp_path: Path, run: int
) -> None:
    """r1h2's link is cut while the first image chunk is on its way and stays cut: the
    source's three transfers time out (5 s each), it cannot tell the target to abort, and
    restores the container at home. The target, reachable again, deletes the images it
    never restored once the step's deadline has passed (its source can no longer ask for
    a restore), which also frees the cores they held there."""
    a = Agents(testbed, tmp_path, [], cores=CORES)
    try:
        a.start("r1h1", CORES, peer_timeout_s=5.0)
        a.start("r1h2", CORES, pause_at="target-receiving:2")
        job, counter = start_job(testbed, NODE, 80)
        a.send(step(testbed, (1, 0), NODE, "r1h1", "r1h2", deadline_s=25))
        assert wait_until(lambda: "pause point target-receiving reached" in a.log("r1h2"), 60)
        _link("down")
        try:
            doc = a.wait("r1h1", "1:0", timeout=90)
        finally:
            _link("up")
        assert "transfer to r1h2 failed 3 times" in doc["message"], doc
        assert "target abort failed" in doc["message"], doc
        _ends_on_source(a, testbed, doc, deadline_s=25)
        # (the images may already be gone: the rollback ends about when the deadline passes)
        incoming = a.state_dir("r1h2") / "incoming"
        assert wait_until(lambda: not any(p.is_file() for p in incoming.rglob("*")), 40), a.log(
            "r1h2"
        )
        # the sweep logs once expire() has deleted them all: wait for the line too
        assert wait_until(
            lambda: "1:0 host=r1h2 images deleted: deadline passed" in a.log("r1h2"), 10
        ), a.log("r1h2")
        no_images_left(a, ["r1h1", "r1h2"])
        job_ends_well(job, NODE, counter, 80)
    finally:
        _link("up")
        a.stop()
        send_home(testbed, tmp_path, NODE, "r1h1")
        _back_in_service()


# fencing on the testbed: the target kills a copy not committed 12 s after the restore
# was asked; clocks are one machine's, so the smallest skew (1 s) holds
FENCE_OPTS = "restore_lease_s = 12\nmax_skew_s = 1\n"
FENCE_LINES = 250  # 25 s: the job outlives the fenced copy's run on r1h2


def _replayed_from_the_dump(lines: list[str], n: int) -> bool:
    """1..k then d+1..n with d <= k: every line in order, and one stretch written twice
    (by the copy that ran on the target until its fence, then by the source's restore
    from the same dump)."""
    got = [int(x) for x in lines]
    for i in range(1, len(got)):
        if got[i] != got[i - 1] + 1:
            rest = got[i:]
            return (
                got[:i] == list(range(1, i + 1))
                and rest[0] <= got[i - 1]  # a replay, not a gap
                and rest == list(range(rest[0], n + 1))
            )
    return got == list(range(1, n + 1))


@pytest.mark.parametrize("run", range(RUNS))
def test_link_cut_during_the_restore_is_fenced(
    testbed: dict[str, Any], tmp_path: Path, run: int
) -> None:
    """r1h2 restores the container and holds its answer 3 s (pause point
    target-restored:3); r1h2's link is cut then and stays cut, so the source never hears
    whether the copy runs and cannot ask for an abort. The target's sweep kills its
    uncommitted copy at the fence time (12 s after the restore was asked); the source
    restores its own only after that time plus max_skew_s and one sweep. Sampled every
    0.2 s throughout, the container never runs on both hosts; it ends on r1h1 once, the
    job ends as one COMPLETED run. The copy that ran on r1h2 until its fence did write
    to the shared file: those lines come again from the source's restore (the dump's
    state), which the job's file shows as one stretch written twice."""
    a = Agents(testbed, tmp_path, [], cores=CORES)
    both: list[float] = []
    done = threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + 300
        while not done.is_set() and time.monotonic() < deadline:
            if lxc_state(NODE, "r1h1") == "RUNNING" and lxc_state(NODE, "r1h2") == "RUNNING":
                both.append(time.monotonic())
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    try:
        a.start("r1h1", CORES, peer_timeout_s=5.0, options=FENCE_OPTS)
        a.start("r1h2", CORES, pause_at="target-restored:3", options=FENCE_OPTS)
        job, counter = start_job(testbed, NODE, FENCE_LINES)
        watcher.start()
        a.send(step(testbed, (1, 0), NODE, "r1h1", "r1h2"))
        assert wait_until(lambda: "pause point target-restored reached" in a.log("r1h2"), 60)
        _link("down")
        try:
            doc = a.wait("r1h1", "1:0", timeout=120)
        finally:
            _link("up")
        assert doc["state"] == "rolled_back", a.explain(doc, "r1h1", "r1h2")
        m = doc["message"]
        assert "waiting for the target's fence" in m, m
        assert "target unreachable past its fence time: its copy is killed" in m, m
        assert "rolled back: restored on r1h1" in m, m
        assert "1:0 host=r1h2 r1h1c2 killed: restored, no commit by its fence time" in a.log("r1h2")
        assert running_on(testbed, NODE) == ["r1h1"]
        done.set()
        watcher.join(10)
        assert both == [], f"running on both hosts {len(both)} times"
        # the same step id again: its status, never a second run
        assert a.send(step(testbed, (1, 0), NODE, "r1h1", "r1h2"))["state"] == "rolled_back"
        no_images_left(a, ["r1h1", "r1h2"])
        assert wait_until(lambda: count_lines(counter) >= FENCE_LINES, 90)
        one_completed_run(job)
        lines = counter.read_text().split()
        assert lines[-1] == str(FENCE_LINES), lines[-5:]
        assert _replayed_from_the_dump(lines, FENCE_LINES), lines
    finally:
        done.set()
        _link("up")
        a.stop()
        send_home(testbed, tmp_path, NODE, "r1h1")
        _back_in_service()
