"""The REST API in-process: ingest, refusals, roles, classification, power, repack."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from clavis.service import tables as t
from clavis.service.advice_worker import AdviceWorker
from clavis.service.api import create_app, serve
from clavis.service.config import load_config
from clavis.service.daemon import Clavisd
from clavis.service.store import Store

from .helpers import (
    KEYS,
    container,
    contended,
    login,
    post_report,
    report,
    signed,
    write_setup,
)


def test_health_and_openapi(client: TestClient) -> None:
    r = client.get("/api/v1/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    doc = client.get("/api/v1/openapi.json").json()
    assert "/api/v1/reports" in doc["paths"]
    assert "MonitorReport" in doc["components"]["schemas"]


def test_a_report_is_stored_and_listed(client: TestClient) -> None:
    r = post_report(
        client, report("h1", [container("n1", traffic=[{"peer": "n2", "bytes_per_s": 5.0}])])
    )
    assert r.status_code == 202, r.text
    assert r.json()["containers"] == 1
    view = login(client, "vic")
    hosts = {h["name"]: h for h in client.get("/api/v1/hosts", headers=view).json()}
    assert hosts["h1"]["watts"] == 150.0 and hosts["h2"]["last_report"] is None
    (c,) = client.get("/api/v1/containers", headers=view).json()
    assert c["host"] == "h1" and c["traffic"] == {"n2": 5.0} and c["votes"] == "t"


def test_unauthenticated_reports_are_refused(client: TestClient) -> None:
    body = json.dumps(report("h1", [])).encode()
    path = "/api/v1/reports"
    assert client.post(path, content=body).status_code == 401
    h = signed(path, body, by="h1")
    bad = {**h, "X-Clavis-Signature": "0" * 64}
    r = client.post(path, content=body, headers=bad)
    assert r.status_code == 401 and "does not match" in r.json()["detail"]
    assert client.post(path, content=body, headers=h).status_code == 202
    r = client.post(path, content=body, headers=h)
    assert r.status_code == 401 and "replayed" in r.json()["detail"]
    old = signed(path, body, now=time.time() - 300, by="h1")
    r = client.post(path, content=body, headers=old)
    assert r.status_code == 401 and "from this clock" in r.json()["detail"]


def _send(client: TestClient, doc: object) -> tuple[int, str]:
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    host = doc.get("host") if isinstance(doc, dict) else None
    headers = signed("/api/v1/reports", body, by=host if f"{host}-k1" in KEYS else "h1")
    r = client.post("/api/v1/reports", content=body, headers=headers)
    return r.status_code, r.json()["detail"] if r.status_code >= 400 else ""


def test_bad_reports_get_a_clear_4xx_and_change_nothing(
    client: TestClient, clavisd: Clavisd
) -> None:
    now = time.time()
    assert _send(client, report("h2", [container("m1")], ts=now - 5))[0] == 202
    cases = [
        (b"{not json", 422, "malformed report"),
        ({"host": "h1"}, 422, "field required"),
        (report("h9", []), 422, "unknown host 'h9'"),
        (report("h1", [], ts=now - 100_000), 422, "stale report"),  # beyond max_backlog_s
        (report("h1", [], ts=now + 1000), 422, "in the future"),
        (report("h2", [container("m1")], ts=now - 10), 409, "not newer"),
        (report("h1", [container("x", cores=0)]), 422, "cores"),
        (b"{" + b" " * 300_000 + b"}", 413, "limit"),
    ]
    for doc, status, words in cases:
        got, detail = _send(client, doc)
        assert (got, words in detail) == (status, True), (got, detail)
    # Nothing of the refused reports reached the store; h2's data is intact.
    view = login(client, "vic")
    (c,) = client.get("/api/v1/containers", headers=view).json()
    assert c["name"] == "m1" and c["host"] == "h2"
    assert clavisd.ingestor.stored == 1


def test_roles(client: TestClient) -> None:
    assert client.get("/api/v1/hosts").status_code == 401
    r = client.post("/api/v1/login", json={"user": "ada", "password": "wrong"})
    assert r.status_code == 401
    r = client.post("/api/v1/login", json={"user": "nobody", "password": "x"})
    assert r.status_code == 401
    view = login(client, "vic")
    assert client.get("/api/v1/plans", headers=view).status_code == 200
    r = client.post("/api/v1/repack", json={"apply": False}, headers=view)
    assert r.status_code == 403 and "admin" in r.json()["detail"]
    r = client.post("/api/v1/power-models/fit", headers=view)
    assert r.status_code == 403
    r = client.get("/api/v1/hosts", headers={"Authorization": "Bearer forged"})
    assert r.status_code == 401


def test_hysteresis_seven_of_ten(client: TestClient) -> None:
    t0 = time.time() - 60
    view = login(client, "vic")

    def send(i: int, mpki: float) -> dict[str, object]:
        assert (
            post_report(client, report("h1", [container("n1", mpki=mpki)], ts=t0 + i)).status_code
            == 202
        )
        (c,) = client.get("/api/v1/containers", headers=view).json()
        return dict(c)

    for i in range(6):
        assert send(i, 9.0)["klass"] is None  # 6 devil votes: not yet
    c = send(6, 9.0)
    assert (c["klass"], c["class_source"]) == ("devil", "samples")
    for i in range(7, 13):  # turtle votes; the window still holds >= 4 devils until the 7th
        assert send(i, 0.5)["klass"] == "devil"
    assert send(13, 0.5)["klass"] == "turtle"
    (job,) = client.get("/api/v1/jobs", headers=view).json()
    assert job["klass"] == "turtle"


def test_application_memory_classifies_a_new_job_before_its_first_vote(
    client: TestClient, clavisd: Clavisd
) -> None:
    t0 = time.time() - 60
    for i in range(7):
        doc = report("h1", [container("n1", job="100", app="1000:lbm", mpki=20.0)], ts=t0 + i)
        assert post_report(client, doc).status_code == 202
    # A new job of the same application on another node, with no counters at all.
    doc = report("h2", [container("n2", job="101", app="1000:lbm", mpki=None)], ts=t0 + 8)
    assert post_report(client, doc).status_code == 202
    view = login(client, "vic")
    got = {c["name"]: c for c in client.get("/api/v1/containers", headers=view).json()}
    assert (got["n2"]["klass"], got["n2"]["class_source"]) == ("devil", "memory")
    jobs = {j["name"]: j["klass"] for j in client.get("/api/v1/jobs", headers=view).json()}
    assert jobs == {"100": "devil", "101": "devil"}
    assert clavisd.store.app_classes() == {"1000:lbm": "devil"}
    with clavisd.store.engine.connect() as conn:
        assert conn.execute(t.app_classes.select()).one().jobs_seen == 2  # jobs 100 and 101


def test_power_models_are_fitted_from_reports(client: TestClient) -> None:
    t0 = time.time() - 60
    for i in range(10):
        busy = float(i % 8)
        doc = report("h1", [], ts=t0 + i, busy=busy, watts=95.0 + 11.0 * busy)
        assert post_report(client, doc).status_code == 202
    admin = login(client, "ada")
    r = client.post("/api/v1/power-models/fit", headers=admin)
    assert r.status_code == 200
    out = r.json()
    (m,) = out["fitted"]
    assert m["host"] == "h1" and abs(m["idle_w"] - 95) < 1e-6 and abs(m["slope_w"] - 11) < 1e-6
    assert m["r2"] > 0.999 and m["samples"] == 10
    assert "need at least" in out["refused"]["h2"]


def test_repack_dry_run_stores_nothing_and_apply_stops_without_an_agent(
    client: TestClient, clavisd: Clavisd
) -> None:
    contended(client)
    admin = login(client, "ada")
    r = client.post("/api/v1/repack", json={"apply": False}, headers=admin)
    assert r.status_code == 200, r.text
    dry = r.json()
    assert dry["decision"] == "planned", dry
    assert dry["f_target"] < dry["f_current"] and "dry run: nothing stored" in dry["message"]
    assert dry["plan"] is None and dry["proposal"]["steps"]
    assert set(dry["proposal"]["summary"]["contended"]) == {"h1", "h2"}
    assert clavisd.store.plans() == []
    # Apply: the plan is stored; no migrator agent listens, so it stays pending and says why.
    r = client.post("/api/v1/repack", json={"apply": True}, headers=admin)
    assert r.status_code == 200, r.text
    out = r.json()
    plan = out["plan"]
    assert out["proposal"] is None and plan["state"] == "pending"
    assert [(s["container"], s["target"]) for s in plan["steps"]] == [
        (s["container"], s["target"]) for s in dry["proposal"]["steps"]
    ]
    assert "no migrator agent answered" in plan["message"]
    # A retry of the pending plan: still no agent, still pending.
    r = client.post(f"/api/v1/plans/{plan['id']}/apply", headers=admin)
    assert r.status_code == 200
    after = r.json()
    assert after["state"] == "pending"
    assert "no migrator agent answered" in after["message"]
    assert all(s["state"] == "pending" for s in after["steps"])
    events = clavisd.store.events(plan["id"])
    assert [e.state for e in events if e.idx == 0] == ["dispatched", "pending"] * 2


def test_advice_file(client: TestClient, clavisd: Clavisd) -> None:
    contended(client)
    clavisd.publish_advice()
    doc = json.loads(clavisd.config.advice.path.read_text())
    assert doc["kind"] == "clavis.advice" and doc["schema_version"] == 2
    nodes = {n["node"]: n for n in doc["nodes"]}
    assert nodes["a1"] == {"node": "a1", "host": "h1", "rack": "r1", "contention": "contended",
                           "node_class": "devil"}  # fmt: skip
    assert nodes["b2"]["host"] == "h2" and nodes["b2"]["rack"] == "r0"
    # Nothing changed: the same advice, issued again with a newer time, by a rename (a
    # new file, none half-written or left behind).
    path = clavisd.config.advice.path
    inode = path.stat().st_ino
    time.sleep(0.01)
    clavisd.publish_advice()
    assert path.stat().st_ino != inode
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}")] == []
    again = json.loads(clavisd.config.advice.path.read_text())
    assert again["nodes"] == doc["nodes"] and again["generated"] > doc["generated"]
    # a1 moves to h3: the advice is rebuilt (h1 keeps one devil: no longer contended).
    now = time.time()
    for host, names in (("h1", ("b1",)), ("h3", ("a1",))):
        cs = [container(n, job=n[0], mpki=20.0) for n in names]
        assert post_report(client, report(host, cs, ts=now)).status_code == 202
    clavisd.publish_advice()
    moved = {n["node"]: n for n in json.loads(clavisd.config.advice.path.read_text())["nodes"]}
    assert moved["a1"]["host"] == "h3" and moved["b1"]["contention"] == "ok"
    assert moved["a2"]["contention"] == "contended"


def test_the_framework_route_answers_like_the_fast_path(clavisd: Clavisd) -> None:
    """Without the fast-path layer, FastAPI's own route applies the same rules."""
    with TestClient(create_app(clavisd)) as plain:
        doc = report("h3", [container("p1")])
        assert post_report(plain, doc).status_code == 202
        assert post_report(plain, doc).status_code == 409
        r = plain.post("/api/v1/reports", content=b"{}")
        assert r.status_code == 401
        big = b"{" + b" " * 300_000 + b"}"
        r = plain.post(
            "/api/v1/reports", content=big, headers=signed("/api/v1/reports", big, by="h3")
        )
        assert r.status_code == 413 and "limit" in r.json()["detail"]


@pytest.mark.parametrize("writer", ["process", "thread"])
def test_either_writer_stores_what_the_contract_validated(tmp_path: Path, writer: str) -> None:
    """The writer reads the validated body as plain JSON: absent optional fields get the
    contract's defaults and integers are stored as the numbers validation made them."""
    cfg = write_setup(tmp_path, extra=f'[repack]\ninterval_s = 0\n[ingest]\nwriter = "{writer}"\n')
    d = Clavisd(load_config(cfg))
    d.ingestor.start()
    try:
        with TestClient(serve(d)) as client:
            doc = report("h1", [container("n1", traffic=[{"peer": "n2", "bytes_per_s": 5}]),
                                {"name": "n2", "cores": 1, "memory_bytes": 0, "busy_cores": 1,
                                 "intensity_mpki": None, "intensity_source": "unsupported"}],
                         busy=3)  # fmt: skip
            assert post_report(client, doc).status_code == 202
            view = login(client, "vic")
            got = {c["name"]: c for c in client.get("/api/v1/containers", headers=view).json()}
            (h1,) = [h for h in client.get("/api/v1/hosts", headers=view).json()
                     if h["name"] == "h1"]  # fmt: skip
    finally:
        d.stop()
    assert got["n1"]["traffic"] == {"n2": 5.0} and got["n1"]["job"] == "j1"
    assert got["n2"]["traffic"] == {} and got["n2"]["job"] is None and got["n2"]["app"] is None
    assert got["n2"]["intensity_mpki"] is None and got["n2"]["votes"] == ""
    assert got["n1"]["votes"] == "t" and got["n1"]["app"] == "j1"
    assert h1["busy_cores"] == 3.0 and h1["watts"] == 150.0
    with Store(f"sqlite:///{tmp_path / 'clavis.db'}").engine.connect() as conn:
        (sample,) = conn.execute(select(t.container_samples).where(
            t.container_samples.c.container == "n1")).all()  # fmt: skip
    assert json.loads(sample.traffic) == {"n2": 5.0} and sample.intensity_source == "recorded"


def test_advice_process_builds_it_and_clavisd_takes_over_when_it_is_gone(
    client: TestClient, clavisd: Clavisd
) -> None:
    cfg = clavisd.config
    worker = AdviceWorker(cfg.store.url, cfg.cluster_file, cfg.ingest.max_report_age_s,
                          cfg.classify, cfg.advice.valid_s)  # fmt: skip
    worker.start()
    clavisd._advice_worker = worker
    contended(client)
    clavisd.publish_advice()
    nodes = {n["node"]: n for n in json.loads(cfg.advice.path.read_text())["nodes"]}
    assert nodes["a1"]["contention"] == "contended" and nodes["a1"]["node_class"] == "devil"
    worker.stop()  # the process ends; the next rebuild happens in clavisd itself
    assert not worker.alive()
    for host, names in (("h1", ("b1",)), ("h3", ("a1",))):
        cs = [container(n, job=n[0], mpki=20.0) for n in names]
        assert post_report(client, report(host, cs, ts=time.time())).status_code == 202
    clavisd.publish_advice()
    nodes = {n["node"]: n for n in json.loads(cfg.advice.path.read_text())["nodes"]}
    assert nodes["a1"]["host"] == "h3" and clavisd._advice_worker is None
