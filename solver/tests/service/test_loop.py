"""The internal repack loop of a real clavisd (thesis §5.5.3: a pass every interval), run
with a 1 s interval: it decides on its own, with no repack request from anyone."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import pytest

from .helpers import contention_reports, write_setup
from .process import Daemon, free_port, wait_for

pytestmark = pytest.mark.slow


def test_the_internal_loop_decides_and_plans_on_its_own(tmp_path: Path) -> None:
    port = free_port()
    extra = ("[repack]\ninterval_s = 1\ntime_limit_s = 5\nworkers = 1\n"
             f'[migrator]\naddress = "127.0.0.1:{free_port()}"\ntimeout_s = 1\n')  # fmt: skip
    cfg = write_setup(tmp_path, extra=extra, port=port)
    log = tmp_path / "clavisd.log"
    d = Daemon(cfg, port, log)
    d.start()
    try:
        # Nothing reported yet: the loop's passes decide there is nothing to do.
        wait_for(lambda: "repack decision=no-change no container has reported" in log.read_text(),
                 15, "the loop's first pass")  # fmt: skip
        assert d.call("GET", "/api/v1/plans") == []
        for doc in contention_reports(age=20):
            d.call("POST", "/api/v1/reports", doc)
        sent = time.monotonic()
        plans: list[Any] = []

        def two_plans() -> bool:
            plans[:] = d.call("GET", "/api/v1/plans")
            return len(plans) >= 2

        # Two passes, each about a second apart: each plans and tries to start its plan.
        # (Bounded well under the 10 s a pass of the maintenance loop may otherwise wait.)
        wait_for(two_plans, 9, "two plans from the loop")
        took = time.monotonic() - sent
        # The loop's plans keep their replay records too (decision replay)
        record = d.call("GET", f"/api/v1/plans/{plans[0]['id']}/replay")
        assert (record["kind"], record["plan"]) == ("clavis.replay", plans[0]["id"])
        assert record["outcome"]["F"] == plans[0]["summary"]["f_solver"]
    finally:
        d.stop()
    assert took < 9
    first, last = plans[0], plans[-1]
    # No migrator agent answers: each plan is left pending and the next pass supersedes it
    # (the newest may be caught while its pass still tries to start it).
    assert all(p["state"] == "superseded" for p in plans[:-1]), plans
    assert first["message"] == "a newer plan replaced it"
    assert last["state"] in ("pending", "running"), last
    moved = {s["container"] for s in first["steps"]}
    assert moved and moved <= {"a1", "b1", "a2", "b2"}
    assert set(first["summary"]["contended"]) == {"h1", "h2"}
    text = log.read_text()
    stamps = [dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
              for line in text.splitlines() if "repack decision=planned" in line]  # fmt: skip
    assert len(stamps) >= 2
    assert (stamps[1] - stamps[0]).total_seconds() < 4  # the interval (1 s) plus one solve
    assert "no migrator agent answered" in text
