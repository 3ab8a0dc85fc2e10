"""A plan whose moves cannot be ordered (issue 13): two full hosts whose best placement is a
swap, with no third host to stage on. Nothing can run, so nothing is stored or started,
and the answer names the deferred moves; F after is what the runnable steps reach, not
the solver's placement."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from clavis.service.api import serve
from clavis.service.config import load_config
from clavis.service.daemon import Clavisd
from clavis.service.plan import Move, Step
from clavis.service.repack import decide

from .helpers import container, login, post_report, report, write_setup
from .process import Daemon, free_port


# C alone (and a little M): the two talking pairs want to be together.
def _crossed_reports() -> list[dict[str, Any]]:
    t0 = time.time() - 10
    layout = {"h1": (("a1", "a", "a2"), ("b1", "b", "b2")),
              "h2": (("a2", "a", "a1"), ("b2", "b", "b1"))}  # fmt: skip
    return [report(host, [_pair(*c) for c in cs], ts=t0 + i)
            for i in range(3) for host, cs in layout.items()]  # fmt: skip


_EXTRA = ("[repack]\ninterval_s = 0\ntime_limit_s = 5\nworkers = 1\n"
          "default_weights = [0.0, 0.0, 1.0, 0.01]\n"
          '[migrator]\naddress = "127.0.0.1:9"\ntimeout_s = 1\n')  # fmt: skip


def _pair(name: str, job: str, peer: str) -> dict[str, Any]:
    return container(name, job=job, mpki=1.0, cores=4,
                     traffic=[{"peer": peer, "bytes_per_s": 1e9}])  # fmt: skip


@pytest.fixture
def crossed(tmp_path: Path) -> Iterator[tuple[Clavisd, TestClient]]:
    """h1 runs a1 and b1, h2 runs a2 and b2 (4 of 8 cores each: both full); job a's two
    containers talk, so do b's: swapping b1 and a2 removes all cross-host traffic."""
    d = Clavisd(load_config(write_setup(tmp_path, hosts=2, extra=_EXTRA)))
    d.ingestor.start()
    try:
        with TestClient(serve(d)) as client:
            for doc in _crossed_reports():
                assert post_report(client, doc).status_code == 202
            yield d, client
    finally:
        d.stop()


def test_a_plan_of_deferred_moves_is_not_stored_and_names_them(
    crossed: tuple[Clavisd, TestClient],
) -> None:
    d, client = crossed
    snap, (w, _) = d.snapshot(time.time()), d.weights()
    decision = decide(snap, w, d.config.repack)
    assert decision.decision == "deferred", decision.message
    assert decision.plan is not None and decision.plan.steps == ()
    assert {m.container for m in decision.plan.deferred} == {"a2", "b1"} or {
        m.container for m in decision.plan.deferred
    } == {"a1", "b2"}
    # Nothing runs, so F after is F now; the solver's better F is kept apart.
    assert decision.f_target == decision.f_current
    assert decision.f_solver is not None and decision.f_solver < decision.f_current
    admin = login(client, "ada")
    for apply in (False, True):
        r = client.post("/api/v1/repack", json={"apply": apply}, headers=admin)
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["decision"] == "deferred" and out["plan"] is None
        proposal = out["proposal"]
        assert proposal["steps"] == [] and proposal["f_target"] == proposal["f_current"]
        moved = {(m["container"], m["source"], m["target"]) for m in proposal["deferred"]}
        assert len(moved) == 2 and all(src != dst for _, src, dst in moved)
        for name, src, dst in moved:
            assert f"{name} {src}->{dst}" in out["message"]
        assert "nothing planned" in out["message"]
    assert d.store.plans() == []  # with apply too: no plan "done" with a gain it never made


def test_deferred_moves_are_listed_with_a_stored_plan(crossed: tuple[Clavisd, TestClient]) -> None:
    """Stored plans keep their deferred moves (typed in the API); the executor's final
    message counts them."""
    d, client = crossed
    steps = [Step(index=0, wave=0, move=Move("a2", "h2", "h1", 4, 2**30))]
    summary = {"deferred": [{"container": "b1", "source": "h1", "target": "h2", "cores": 4,
                             "memory_bytes": 2**30}], "f_solver": 0.1}  # fmt: skip
    plan_id = d.store.create_plan(0.5, 0.4, summary, steps, time.time())
    d.store.set_step(plan_id, 0, "done", "moved", time.time())
    d.executor._advance(plan_id)
    r = client.get(f"/api/v1/plans/{plan_id}", headers=login(client, "vic"))
    plan = r.json()
    assert plan["state"] == "done" and plan["message"] == "1 steps done; 1 moves deferred, not run"
    assert plan["deferred"] == summary["deferred"]


@pytest.mark.slow
def test_clavis_repack_prints_the_deferred_moves(tmp_path: Path) -> None:
    port = free_port()
    cfg = write_setup(tmp_path, hosts=2, extra=_EXTRA, port=port)
    d = Daemon(cfg, port, tmp_path / "clavisd.log")
    d.start()
    clavis = [str(Path(sys.executable).parent / "clavis"), "repack", "--config", str(cfg)]
    try:
        for doc in _crossed_reports():
            d.call("POST", "/api/v1/reports", doc)
        for flag, code in (("--dry-run", 0), ("--apply", 1)):
            out = subprocess.run([*clavis, flag], capture_output=True, text=True, timeout=120,
                                 check=False)  # fmt: skip
            assert out.returncode == code, (flag, out.stdout, out.stderr)
            assert "decision: deferred" in out.stdout
            assert "deferred: 2 moves not run" in out.stdout
            assert "nothing stored, nothing moved" in out.stdout
            lines = [ln.split() for ln in out.stdout.splitlines()]
            moves = [ln[:3] for ln in lines if len(ln) == 5 and ln[0] in ("a1", "a2", "b1", "b2")]
            assert len(moves) == 2 and all(m[1] != m[2] for m in moves), out.stdout
        assert d.call("GET", "/api/v1/plans") == []
    finally:
        d.stop()
