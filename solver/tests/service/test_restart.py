"""kill -9 of a real clavisd at each point of a plan's life, and a restart: the plan resumes,
no container is moved twice, and no finished step loses its record.

The points: inside the transaction that stores the plan, just after it is committed with
no step dispatched, just after a step's dispatch is committed and before its request is
sent (these three held there by clavisd's pause points, service/pausepoints.py), between a
step's dispatch and the agent's answer (held by the protocol recorder), and with one step
done and the next in flight."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from clavis.service.store import Store

from .helpers import container, contention_reports, report, store_rows, write_setup
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
    rows = [(e.idx, e.ts) for e in store.events(plan)
            if e.idx is not None and e.state == "done"]  # fmt: skip
    store.close()
    assert sorted(idx for idx, _ in rows) == list(range(n_steps))
    # The audit log says the steps were answered by the test recorder, which moved nothing.
    assert all(s["message"] == NOTHING_MOVED for s in final["steps"])
    # (A second step was dispatched before the crash, so the first one's "done" was stored.)
    assert any(ts < crash for _, ts in rows)


def _setup(tmp_path: Path, recorder: ProtocolRecorder, store_url: str, timeout_s: float) -> Daemon:
    port = free_port()
    extra = ("[repack]\ninterval_s = 0\ntime_limit_s = 5\nworkers = 1\nparallelism = 1\n"
             "poll_s = 0.2\n"
             f'[migrator]\naddress = "127.0.0.1:{recorder.port}"\n'
             f"timeout_s = {timeout_s}\n")  # fmt: skip
    cfg = write_setup(tmp_path, extra=extra, port=port, store_url=store_url)
    return Daemon(cfg, port, tmp_path / "clavisd.log")


def _contend(d: Daemon) -> None:
    """Two devil jobs contending on h1 and h2; h3 and h4 empty."""
    for doc in contention_reports(age=20):
        d.call("POST", "/api/v1/reports", doc)


def _repack_in_background(d: Daemon) -> threading.Thread:
    """`POST /repack {"apply": true}`, whose answer never comes: clavisd is killed first."""

    def ask() -> None:
        with contextlib.suppress(httpx.HTTPError, AssertionError):
            d.call("POST", "/api/v1/repack", {"apply": True})

    th = threading.Thread(target=ask, daemon=True)
    th.start()
    return th


def _finish(d: Daemon, plan: int) -> dict[str, Any]:
    wait_for(lambda: d.call("GET", f"/api/v1/plans/{plan}")["state"] == "done", 90,
             "the plan to finish")  # fmt: skip
    out: dict[str, Any] = d.call("GET", f"/api/v1/plans/{plan}")
    return out


def _each_container_moved_once(
    rec: ProtocolRecorder, final: dict[str, Any], store_url: str
) -> None:
    record = rec.record
    assert not record.refused, record.refused
    assert all(s["state"] == "done" for s in final["steps"])
    steps = {f"{final['id']}:{s['idx']}" for s in final["steps"]}
    # Every step of the plan ran once on the recorder, no other step ran, and each
    # container was moved by one step only.
    assert set(record.accepted) == steps
    moved = [s.container for s in record.steps.values()]
    assert len(moved) == len(set(moved)) == len(steps)
    # The audit log has every step done exactly once.
    store = Store(store_url)
    done = [e.idx for e in store.events(final["id"]) if e.idx is not None
            and e.state == "done"]  # fmt: skip
    store.close()
    assert sorted(done) == [s["idx"] for s in final["steps"]]


@pytest.mark.parametrize("point", ["plan-insert", "plan-created", "step-dispatched"])
def test_kill9_while_the_plan_is_stored_then_restart_moves_each_container_once(
    tmp_path: Path, recorder: ProtocolRecorder, store_url: str, point: str
) -> None:
    d = _setup(tmp_path, recorder, store_url, timeout_s=2)
    d.start(env={"CLAVISD_PAUSE_AT": point})
    try:
        _contend(d)
        _repack_in_background(d)
        wait_for(lambda: f"pause point {point} reached" in d.log.read_text(), 60,
                 f"clavisd to reach {point}")  # fmt: skip
        seen = store_rows(store_url)  # what another connection sees at the crash
        assert recorder.record.posts == {}, "nothing may be dispatched before the crash"
        d.kill9()
        d.start()  # no pause point now
        after = store_rows(store_url)
        if point == "plan-insert":
            # Killed inside the transaction: no plan, step or audit row of it was committed,
            # so none is left half-written; the next pass plans again from scratch.
            assert seen["plans"] == after["plans"] == []
            assert after["migration_steps"] == after["step_events"] == []
            out = d.call("POST", "/api/v1/repack", {"apply": True})
            assert out["decision"] == "planned", out
            plan = out["plan"]["id"]
        else:
            # Committed as running, every step pending (or the first one marked dispatched,
            # its request never sent): the restarted clavisd resumed the plan by itself.
            (stored,) = seen["plans"]
            plan = stored["id"]
            assert stored["state"] == "running"
            states = sorted((r["state"], r["dispatches"]) for r in seen["migration_steps"])
            first = ("dispatched", 1) if point == "step-dispatched" else ("pending", 0)
            assert states == sorted([first] + [("pending", 0)] * (len(states) - 1))
            wait_for(lambda: f"resumed plans [{plan}]" in d.log.read_text(), 30, "the resume")
        final = _finish(d, plan)
    finally:
        d.stop()
    assert [p["id"] for p in store_rows(store_url)["plans"]] == [plan]
    _each_container_moved_once(recorder, final, store_url)


@pytest.fixture
def holding_recorder() -> Iterator[ProtocolRecorder]:
    with ProtocolRecorder(delay_s=1.0, hold_first_answer=True) as a:
        yield a


def test_kill9_between_dispatch_and_the_agents_answer_then_restart_sends_it_once_more(
    tmp_path: Path, holding_recorder: ProtocolRecorder, store_url: str
) -> None:
    rec = holding_recorder
    # The agent holds its answer; clavisd waits for it far longer than the test takes.
    d = _setup(tmp_path, rec, store_url, timeout_s=60)
    d.start()
    try:
        _contend(d)
        _repack_in_background(d)
        assert rec.held.wait(60), "the first step never reached the agent"
        seen = store_rows(store_url)
        (stored,) = seen["plans"]
        plan, idx = (int(x) for x in rec.held_step.split(":"))
        assert stored["id"] == plan and stored["state"] == "running"
        states = {r["idx"]: (r["state"], r["dispatches"]) for r in seen["migration_steps"]}
        assert states[idx] == ("dispatched", 1)
        assert all(v == ("pending", 0) for i, v in states.items() if i != idx)
        d.kill9()
        rec.release.set()  # its answer now goes to a process that is gone
        d.start()
        final = _finish(d, plan)
    finally:
        d.stop()
    # The step in flight was sent again with the same id after the restart, which the agent
    # answered with its status: it ran once.
    assert len(rec.record.posts[rec.held_step]) >= 2
    _each_container_moved_once(rec, final, store_url)
    store = Store(store_url)
    events = [e.state for e in store.events(plan) if e.idx == idx]
    store.close()
    assert events[0] == "dispatched" and events[-1] == "done" and events.count("done") == 1
