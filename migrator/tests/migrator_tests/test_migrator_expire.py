"""The target side drops images its source can no longer ask it to restore (past the
step's deadline), e.g. after the link between the hosts was cut until the source gave up;
what it restored stays for the source's commit or abort."""

from __future__ import annotations

import time
from pathlib import Path

from clavis_migrator.incoming import Incoming

from .world import TableBackend, files_under, make_agent, step, table


def test_images_past_their_deadline_are_deleted_and_free_the_capacity(tmp_path: Path) -> None:
    t = table("c1", "c2")
    inc = Incoming("h2", tmp_path / "incoming", TableBackend("h2", t), (1, 4 * 2**30))
    inc.prepare(step(1, "c1", index=0, deadline_s=30))
    inc.put("1:0", "pages-1.img", 0, b"half")
    # one core here: c1's step holds it, so c2 is refused until c1's images expire
    refused = ""
    try:
        inc.prepare(step(1, "c2", index=1, deadline_s=30))
    except Exception as exc:
        refused = str(exc)
    assert "over its cores: 1 in use + 1 > 1" in refused
    prepared = (tmp_path / "incoming" / "1_0" / "step.json").stat().st_mtime
    assert inc.expire(now=prepared + 29) == []
    assert files_under(tmp_path / "incoming") == ["1_0/images/pages-1.img", "1_0/step.json"]
    assert inc.expire(now=prepared + 31) == ["1:0"]
    assert files_under(tmp_path / "incoming") == []
    inc.prepare(step(1, "c2", index=1, deadline_s=30))  # the core is free again


def test_a_restored_step_is_never_expired(tmp_path: Path) -> None:
    t = table("c1")
    inc = Incoming("h2", tmp_path / "incoming", TableBackend("h2", t), (4, 4 * 2**30))
    inc.prepare(step(1, "c1", deadline_s=1))
    (tmp_path / "incoming" / "1_0" / "restored").write_text("1")
    assert inc.expire(now=time.time() + 3600) == []
    assert "1_0/restored" in files_under(tmp_path / "incoming")


def test_the_agent_sweeps_by_itself(tmp_path: Path) -> None:
    a2, _ = make_agent(tmp_path, "h2", table("c1"))
    try:
        a2.incoming.prepare(step(1, "c1", deadline_s=1))
        deadline = time.monotonic() + 10
        while files_under(tmp_path / "h2" / "incoming") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert files_under(tmp_path / "h2" / "incoming") == []
    finally:
        a2.stop()
