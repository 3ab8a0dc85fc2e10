"""clavis-migrator's pre-copy on the testbed: a Slurm node container holding 32 MiB of
touched memory, 5% of it rewritten every second by a self-checking process (memhog.py),
moves to the other host of its rack with pre-copy rounds (real LXC, CRIU 4.2.1, agents
in the hosts' netns). It runs exactly once afterwards, on the target, with the same
process, whose memory is still what it wrote."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import tb
from .migrators import Agents, attach, lxc_state, step

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not tb.is_root(), reason="the testbed needs root"),
]

NODE = "r1h1c2"  # on host r1h1; r1h2 is in the same rack
STATE = "/tmp/memhog.state"


def _hog(host: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(attach(NODE, host, f"cat {STATE}"))
    doc["pid"] = int(attach(NODE, host, f"cat {STATE}.pid"))
    return doc


def _ticking(host: str, timeout: float = 20) -> dict[str, Any]:
    """The hog's state once it has ticked at least twice more: it runs."""
    first = _hog(host)
    deadline = time.monotonic() + timeout
    while True:
        now = _hog(host)
        if now["ticks"] >= first["ticks"] + 2:
            return now
        assert time.monotonic() < deadline, (first, now)
        time.sleep(0.2)


def _home(testbed: dict[str, Any], root: Path) -> None:
    """Leave the node on its own host for the other tests, without the hog."""
    for host in ("r1h1", "r1h2"):
        if lxc_state(NODE, host) == "RUNNING":
            attach(NODE, host, f"[ -f {STATE}.pid ] && kill $(cat {STATE}.pid); true")
    if lxc_state(NODE, "r1h2") == "RUNNING":
        a = Agents(testbed, root / "home", ["r1h1", "r1h2"], cores=8)
        try:
            a.send(step(testbed, (98, 0), NODE, "r1h2", "r1h1"))
            a.wait("r1h2", "98:0")
        finally:
            a.stop()


@pytest.fixture
def agents(testbed: dict[str, Any], tmp_path: Path) -> Iterator[Agents]:
    a = Agents(testbed, tmp_path, ["r1h1", "r1h2"], cores=3, precopy_rounds=3)
    try:
        yield a
    finally:
        a.stop()
        _home(testbed, tmp_path)


def test_a_move_with_precopy_ships_rounds_and_the_container_runs_once(
    testbed: dict[str, Any], agents: Agents
) -> None:
    hog = Path(testbed["shared_dir"]) / "memhog.py"
    shutil.copy(Path(__file__).with_name("memhog.py"), hog)
    attach(
        NODE, "r1h1",
        f"setsid python3 {hog} 32 0.05 {STATE} </dev/null >/dev/null 2>&1 & "
        f"for i in $(seq 100); do [ -f {STATE} ] && break; sleep 0.1; done",
    )  # fmt: skip
    before = _ticking("r1h1")
    assert before["bad"] == "", before

    agents.send(step(testbed, (31, 0), NODE, "r1h1", "r1h2"))
    done = agents.wait("r1h1", "31:0")
    assert done["state"] == "done", agents.explain(done, "r1h1", "r1h2")

    # pre-copy happened and was reported: rounds, what they sent, the final stop only
    assert done["precopy_rounds"] >= 1, done["message"]
    assert "pre-copy round 1: dumped in" in done["message"], done["message"]
    assert "changed since pre-copy round" in done["message"], done["message"]
    assert done["bytes_moved"] > 32 * 2**20  # round 1 carries the 32 MiB at least
    assert done["frozen_s"] is not None and 0 < done["frozen_s"] <= done["seconds"]

    # exactly once: running on the target, not on the source
    assert lxc_state(NODE, "r1h2") == "RUNNING"
    assert lxc_state(NODE, "r1h1") != "RUNNING"
    # the same process ticks on, and every page it checks holds what it wrote
    after = _ticking("r1h2")
    assert after["pid"] == before["pid"] and after["ticks"] > before["ticks"], after
    time.sleep(5.5)  # one check of the cold pages and several of the hot ones
    last = _hog("r1h2")
    assert last["bad"] == "" and last["ticks"] > after["ticks"], last
    # neither host keeps images of the step
    for host in ("r1h1", "r1h2"):
        d = agents.state_dir(host)
        left = [p for p in (d / "outgoing").rglob("*") if p.is_file()]
        left += [p for p in (d / "incoming").rglob("*") if p.is_file()]
        assert left == [], left
