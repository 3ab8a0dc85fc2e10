"""kill -9 of a real clavisd in the middle of a plan, and a restart: the plan resumes, no
container is moved twice, and no finished step loses its record."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clavis.service.store import Store

from .helpers import container, report, write_setup
from .process import Daemon, free_port, wait_for
from .protocol_recorder import NOTHING_MOVED, ProtocolRecorder

pytestmark = pytest.mark.slow


@pytest.fixture
def recorder() -> Iterator[ProtocolRecorder]:
    with ProtocolRecorder(delay_s=1.5) as a:
        yield a


def test_kill9_mid_plan_then_restart_resumes_without_moving_twice(
    tmp_path: Path, recorder: ProtocolRecorder, store_url: str
) -> None:
    port = free_port()
    extra = ("[repack]\ninterval_s = 0\ntime_limit_s = 5\nworkers = 1\nparallelism = 1\n"
             "poll_s = 0.2\n"
             f'[migrator]\naddress = "127.0.0.1:{recorder.port}"\ntimeout_s = 2\n')  # fmt: skip
    cfg = write_setup(tmp_path, extra=extra, port=port, store_url=store_url)
    d = Daemon(cfg, port, tmp_path / "clavisd.log")
    d.start()
    try:
        t0 = time.time() - 20
        for i in range(8):  # two devil jobs contending on h1 and h2; h3, h4 empty
            for host, names in (("h1", ("a1", "b1")), ("h2", ("a2", "b2"))):
                cs = [container(n, job=n[0], mpki=20.0) for n in names]
                d.call("POST", "/api/v1/reports", report(host, cs, ts=t0 + i))
            for host in ("h3", "h4"):
                d.call("POST", "/api/v1/reports", report(host, [], ts=t0 + i, busy=0))
        out = d.call("POST", "/api/v1/repack", {"apply": True})
        assert out["decision"] == "planned", out
        plan = out["plan"]["id"]
        n_steps = len(out["plan"]["steps"])
        assert n_steps >= 2, out
        # Let the first step finish and the next one start, then crash clavisd hard.
        wait_for(lambda: len(recorder.done_steps()) >= 1 and len(recorder.record.accepted) >= 2,
                 60, "one step done and the next in flight")  # fmt: skip
        done_before = set(recorder.done_steps())
        assert d.children(), "clavisd runs its ingest writer as a child process"
        d.kill9()
        crash = time.time()
        d.start()
        wait_for(lambda: d.call("GET", f"/api/v1/plans/{plan}")["state"] == "done", 90,
                 "the resumed plan to finish")  # fmt: skip
        final = d.call("GET", f"/api/v1/plans/{plan}")
    finally:
        d.stop()
    rec = recorder.record
    assert not rec.refused, rec.refused
    assert all(s["state"] == "done" for s in final["steps"])
    # Every step ran once on the recorder, and each container was moved by one step only.
    assert len(rec.accepted) == n_steps
    moved = [s.container for s in rec.steps.values()]
    assert len(moved) == len(set(moved))
    # A step finished before the crash was never sent again.
    for step_id in done_before:
        assert len(rec.posts[step_id]) == 1, (step_id, rec.posts[step_id])
    # Its record survived: the store still has its "done", logged before the crash, and
    # every step is done exactly once in the audit log.
    store = Store(store_url)
    rows = [(e["idx"], e["ts"]) for e in store.events(plan)
            if e["idx"] is not None and e["state"] == "done"]  # fmt: skip
    store.close()
    assert sorted(idx for idx, _ in rows) == list(range(n_steps))
    # The audit log says the steps were answered by the test recorder, which moved nothing.
    assert all(s["message"] == NOTHING_MOVED for s in final["steps"])
    # (A second step was dispatched before the crash, so the first one's "done" was stored.)
    assert any(ts < crash for _, ts in rows)
