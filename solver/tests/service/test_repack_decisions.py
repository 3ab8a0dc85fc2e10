"""What a repacking pass decides on one snapshot (two devil jobs contending on h1 and h2,
h3 and h4 idle): the margin, the migration cost M, and the weights `clavis calibrate`
writes. Every pass here is a dry run, which stores nothing, so each decision is made on
the same snapshot."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from clavis.instance import build_instance
from clavis.objectives import Weights, score
from clavis.service.api import serve
from clavis.service.config import load_config
from clavis.service.daemon import Clavisd
from clavis.service.repack import decide

from .helpers import contended, login, weights_file, worked_front, write_setup


@contextmanager
def running(tmp_path: Path, repack: str = "") -> Iterator[tuple[Clavisd, TestClient]]:
    extra = f"[repack]\ninterval_s = 0\ntime_limit_s = 5\nworkers = 1\n{repack}" \
        '[migrator]\naddress = "127.0.0.1:9"\ntimeout_s = 1\n'  # fmt: skip
    d = Clavisd(load_config(write_setup(tmp_path, extra=extra)))
    d.ingestor.start()
    try:
        with TestClient(serve(d)) as client:
            contended(client)
            yield d, client
    finally:
        d.stop()


def _repack(client: TestClient, admin: dict[str, str], apply: bool = False) -> dict[str, Any]:
    r = client.post("/api/v1/repack", json={"apply": apply}, headers=admin)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def test_an_improvement_within_the_margin_plans_nothing(tmp_path: Path) -> None:
    with running(tmp_path, "margin = 0.99\n") as (d, client):
        admin = login(client, "ada")
        for apply in (False, True):
            out = _repack(client, admin, apply)
            assert out["decision"] == "below-margin", out
            assert out["plan"] is None and out["proposal"] is None
            gain = out["f_current"] - out["f_target"]
            assert 0 < gain <= 0.99
            assert out["message"] == (
                f"F would improve by {gain:.4f} ({out['f_current']:.4f} -> "
                f"{out['f_target']:.4f}), not more than repack.margin 0.99: nothing planned"
            )
        assert d.store.plans() == []
        # The margin alone stopped it: on the same snapshot and weights, a margin just
        # below the gain plans, and a margin equal to it does not ("more than").
        snap, (w, _) = d.snapshot(time.time()), d.weights()
        below = decide(snap, w, d.config.repack.model_copy(update={"margin": gain - 1e-6}))
        assert below.decision == "planned" and below.plan is not None and below.plan.steps
        equal = decide(snap, w, d.config.repack.model_copy(update={"margin": gain}))
        assert equal.decision == "below-margin" and equal.plan is None


def test_migration_cost_stops_a_move_that_would_otherwise_be_made(tmp_path: Path) -> None:
    with running(tmp_path) as (_, client):
        admin = login(client, "ada")
        outs = {}
        for m in (0.0, 5.0):  # the same P, D, C; only the weight of M differs
            r = client.post("/api/v1/weights", content=weights_file(0.15, 1.94, 0.68, m),
                            headers={**admin, "Content-Type": "application/json"})  # fmt: skip
            assert r.status_code == 200, r.text
            assert r.json()["source"] == "calibrated" and (r.json()["M"] > 0) == (m > 0)
            outs[m] = _repack(client, admin)
    free, costly = outs[0.0], outs[5.0]
    assert free["decision"] == "planned", free
    moved = {s["container"] for s in free["proposal"]["steps"]}
    assert moved and moved <= {"a1", "b1", "a2", "b2"}
    # With M weighed, the best placement is the current one: the move would cost more
    # (memory to copy) than the contention it removes.
    assert costly["decision"] == "below-margin", costly
    assert costly["f_target"] == pytest.approx(costly["f_current"], abs=1e-9)
    assert costly["proposal"] is None and "nothing planned" in costly["message"]


def test_weights_written_by_clavis_calibrate_are_what_repack_uses(tmp_path: Path) -> None:
    front, weights = tmp_path / "front.json", tmp_path / "weights.json"
    front.write_text(json.dumps(worked_front()))
    clavis = Path(sys.executable).parent / "clavis"
    done = subprocess.run([str(clavis), "calibrate", "--front", str(front), "--pick", "0,1,2",
                           "--method", "thesis", "--out", str(weights)],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    file_w = json.loads(weights.read_text())["weights"]
    expect = Weights(file_w["P"], file_w["D"], file_w["C"], file_w["M"])
    default = Weights(*load_config(write_setup(tmp_path)).repack.default_weights)
    assert expect != default
    with running(tmp_path) as (d, client):
        admin = login(client, "ada")
        before = _repack(client, admin)
        r = client.post("/api/v1/weights", content=weights.read_bytes(),
                        headers={**admin, "Content-Type": "application/json"})  # fmt: skip
        assert r.status_code == 200, r.text
        got = r.json()
        assert got["source"] == "calibrated"
        assert [got[k] for k in "PDCM"] == pytest.approx(list(expect.as_tuple()))
        after = _repack(client, admin)
        snap = d.snapshot(time.time())
    inst = build_instance(snap.cluster, snap.workload, snap.current, "current placement")
    current = tuple(h for h in inst.current if h is not None)
    # The pass scored the current placement with the file's weights, not the configured ones.
    assert after["f_current"] == pytest.approx(score(inst, current, expect).F, abs=1e-12)
    assert before["f_current"] == pytest.approx(score(inst, current, default).F, abs=1e-12)
    assert after["f_current"] != pytest.approx(before["f_current"], abs=1e-6)
    assert after["decision"] == "planned", after
    assert after["proposal"]["summary"]["weights"] == pytest.approx(list(expect.as_tuple()))
