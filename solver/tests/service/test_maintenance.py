"""clavisd's periodic tasks each run on their own: a failing advice write (issue 15, item 3:
one ``try`` used to cover all four, so it skipped nonce pruning, retention and the
internal repack on every pass) costs no other task its turn."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, insert, select

from clavis.service import tables as t
from clavis.service.config import load_config
from clavis.service.daemon import Clavisd
from clavis.service.maintenance import Task, run_due, tick_s

from .helpers import write_setup


def test_a_failing_task_costs_no_other_its_turn(caplog: pytest.LogCaptureFixture) -> None:
    ran: list[str] = []

    def boom() -> None:
        ran.append("boom")
        raise OSError("disk full")

    tasks = [Task("boom", 5, boom), Task("a", 1, lambda: ran.append("a")),
             Task("b", 10, lambda: ran.append("b"))]  # fmt: skip
    with caplog.at_level(logging.ERROR, "clavisd.maintenance"):
        assert run_due(tasks, 0.0) == ["boom"]
    assert ran == ["boom", "a", "b"]
    assert "task=boom failed (1 in a row)" in caplog.text and "disk full" in caplog.text
    # Each keeps its own period, the failing one included (no tight retry loop).
    assert [x.due for x in tasks] == [5.0, 1.0, 10.0]
    ran.clear()
    assert run_due(tasks, 1.0) == [] and ran == ["a"]
    assert run_due(tasks, 5.0) == ["boom"] and ran == ["a", "boom", "a"]
    assert tasks[0].failures == 2 and tasks[1].failures == 0
    assert tick_s(tasks) == 1.0
    with pytest.raises(ValueError, match="period must be positive"):
        Task("never", 0, lambda: None)


@pytest.fixture
def broken_advice(tmp_path: Path) -> Iterator[Clavisd]:
    """A clavisd whose advice path cannot be written (it is a directory), repack every 1 s."""
    extra = "[repack]\ninterval_s = 1\ntime_limit_s = 1\nworkers = 1\n" \
        '[migrator]\naddress = "127.0.0.1:9"\ntimeout_s = 0.5\n' \
        "[retention]\nraw_s = 60\nkeep_s = 600\n"  # fmt: skip
    (tmp_path / "advice.json").mkdir()
    d = Clavisd(load_config(write_setup(tmp_path, extra=extra)))
    d.ingestor.start()
    yield d
    d.stop()


def test_an_unwritable_advice_path_skips_no_other_task(
    broken_advice: Clavisd, caplog: pytest.LogCaptureFixture
) -> None:
    d = broken_advice
    now = time.time()
    with d.store.engine.begin() as conn:
        conn.execute(insert(t.nonces), [{"nonce": "old", "signed": now - 3600},
                                        {"nonce": "new", "signed": now}])  # fmt: skip
        conn.execute(insert(t.host_samples), [
            {"host": "h1", "ts": ts, "resolution_s": 1.0, "busy_cores": 1.0, "watts": 120.0,
             "power_source": "ipmi-dcmi"} for ts in (now - 7200, now - 5)
        ])  # fmt: skip
    assert [x.name for x in d.tasks] == ["advice", "nonces", "retention", "repack"]
    with caplog.at_level(logging.INFO):
        assert run_due(d.tasks, time.monotonic() + 3600) == ["advice"]
    assert "task=advice failed" in caplog.text
    assert "repack decision=no-change" in caplog.text  # the repack pass ran
    with d.store.engine.connect() as conn:
        nonces = conn.execute(select(t.nonces.c.nonce)).scalars().all()
        samples = conn.execute(select(func.count()).select_from(t.host_samples)).scalar()
    assert nonces == ["new"]  # pruned
    assert samples == 1  # the 2 h old sample is past keep_s (600 s): retention ran
    assert not any(x.failures for x in d.tasks if x.name != "advice")
