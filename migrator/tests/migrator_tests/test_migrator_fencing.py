"""Fencing (docs/migrator.md, "Fencing"): a link cut between source and target during the
restore or before the commit never leaves the container running on both hosts, and ends
with it running on exactly one. Two real agents over the relay of world.Link; the
Table backend raises if a container is restored where another copy still runs, so a
double run shows as a failed rollback."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clavis_migrator.agent import Agent
from migrator_tests.world import (
    Link,
    Table,
    TableBackend,
    make_agent,
    post,
    step,
    table,
    wait_terminal,
)

LEASE_S = 3.0  # the target's fence: 3 s after the restore was asked


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Agent, Agent, TableBackend, Table, Link]]:
    t = table("c1")
    # max_skew_s 1, the smallest: whole-second timestamps must not refuse genuine calls
    # (clavis_contracts.signing.skew_of)
    opts = {"restore_lease_s": LEASE_S, "max_skew_s": 1.0}
    a1, _ = make_agent(tmp_path, "h1", t, **opts)
    a2, b2 = make_agent(tmp_path, "h2", t, **opts)
    link = Link(a2.port)
    yield a1, a2, b2, t, link
    link.close()
    a1.stop()
    a2.stop()


def _wait_file(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.is_file() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.is_file(), path


def test_a_link_cut_during_the_restore_waits_for_the_fence_then_rolls_back(
    world: tuple[Agent, Agent, TableBackend, Table, Link], tmp_path: Path
) -> None:
    # The target restores, then the link goes before its answer: the source cannot know
    # whether the copy runs, cannot reach the target to abort, and restores its own only
    # after the fence time, by which the target has killed its uncommitted copy.
    a1, _, b2, t, link = world
    b2.after_restore = link.cut
    t0 = time.monotonic()
    post(a1.port, step(link.port))
    done = wait_terminal(a1.port, "1:0", timeout=30)
    assert done["state"] == "rolled_back", done["message"]
    assert t.where["c1"] == "h1"
    assert "waiting for the target's fence" in done["message"]
    calls = t.calls
    assert calls.index("kill c1 on h2") < calls.index("restore c1 on h1"), calls
    assert (tmp_path / "h2" / "ended" / "1_0").read_text() == "fenced"
    assert time.monotonic() - t0 >= LEASE_S


def test_a_commit_that_cannot_reach_the_target_before_its_fence_rolls_back(
    world: tuple[Agent, Agent, TableBackend, Table, Link], tmp_path: Path
) -> None:
    # The restore's answer arrives, the commit does not: the target kills its copy at the
    # fence time; when the link is back it says so, and the source runs its own again.
    a1, _, b2, t, link = world
    b2.after_restore = link.refuse_new
    post(a1.port, step(link.port))
    _wait_file(tmp_path / "h2" / "ended" / "1_0", timeout=LEASE_S + 10)
    assert t.where["c1"] is None  # fenced on h2, not yet back on h1: never twice
    link.mend()
    done = wait_terminal(a1.port, "1:0", timeout=30)
    assert done["state"] == "rolled_back", done["message"]
    assert "fenced" in done["message"] and t.where["c1"] == "h1"


def test_a_commit_that_gets_through_before_the_fence_keeps_the_move(tmp_path: Path) -> None:
    # The commit is refused for a while and goes through before the fence: the move holds.
    t = table("c1")
    opts = {"restore_lease_s": 8.0, "max_skew_s": 1.0}
    a1, _ = make_agent(tmp_path, "h1", t, **opts)
    a2, b2 = make_agent(tmp_path, "h2", t, **opts)
    link = Link(a2.port)
    try:
        b2.after_restore = link.refuse_new
        post(a1.port, step(link.port))
        deadline = time.monotonic() + 10
        while "commit c1 on h2" not in t.calls and time.monotonic() < deadline:
            if "restore c1 on h2" in t.calls:
                time.sleep(1.0)  # a few refused commits
                link.mend()
                break
            time.sleep(0.05)
        done = wait_terminal(a1.port, "1:0", timeout=30)
        assert done["state"] == "done", done["message"]
        assert "asking again" in done["message"] and t.where["c1"] == "h2"
        assert (tmp_path / "h2" / "ended" / "1_0").read_text() == "committed"
    finally:
        link.close()
        a1.stop()
        a2.stop()
