"""Calibration through clavisd (fronts, picks, weights) and the store's retention."""

from __future__ import annotations

import time

import yaml
from fastapi.testclient import TestClient

from clavis.service import tables as t
from clavis.service.daemon import Clavisd

from .helpers import ROOT, cluster_doc, login, post_report, report, worked_front


def test_front_picks_become_the_current_weights(client: TestClient) -> None:
    admin = login(client, "ada")
    assert client.get("/api/v1/weights", headers=admin).json()["source"] == "configured"
    r = client.post("/api/v1/fronts", json=worked_front(), headers=admin)
    assert r.status_code == 200, r.text
    front = r.json()
    assert front["points"] == 4 and front["objectives"] == ["P", "D", "C"]
    r = client.post(f"/api/v1/fronts/{front['id']}/picks", json={"picks": [0, 1, 2]}, headers=admin)
    assert r.status_code == 200, r.text
    doc = r.json()["weights"]
    assert doc["method"] == "thesis" and doc["front_sha256"] == front["sha256"]
    w = client.get("/api/v1/weights", headers=admin).json()
    assert w["source"] == "calibrated"
    assert abs(w["P"] - 1 / 3) < 1e-6 and abs(w["D"] - 1 / 3) < 1e-6 and w["M"] == 0
    # Refusals: unknown point, a repeated pick, an unknown front, a viewer.
    for picks, words in (([0, 1, 9], "no schedule with id 9"), ([0, 0, 1], "picked twice")):
        r = client.post(f"/api/v1/fronts/{front['id']}/picks", json={"picks": picks},
                        headers=admin)  # fmt: skip
        assert r.status_code == 422 and words in r.json()["detail"]
    assert client.post("/api/v1/fronts/99/picks", json={"picks": [0, 1, 2]},
                       headers=admin).status_code == 404  # fmt: skip
    view = login(client, "vic")
    assert client.post("/api/v1/fronts", json=worked_front(), headers=view).status_code == 403
    assert [f["id"] for f in client.get("/api/v1/fronts", headers=view).json()] == [front["id"]]
    r = client.post("/api/v1/fronts", content=b"{}", headers=admin)
    assert r.status_code == 422 and "malformed front" in r.json()["detail"]


def test_a_front_for_another_cluster_is_refused(client: TestClient) -> None:
    """Issue 15, item 9: weights picked from another cluster's front would steer this one."""
    admin = login(client, "ada")
    worked = yaml.safe_load((ROOT / "examples" / "worked" / "cluster.yaml").read_text())
    renamed = {**cluster_doc(), "name": "elsewhere"}
    smaller = cluster_doc(hosts=3)
    wider = cluster_doc(cores=16)
    for cluster, words in (
        (worked, "cluster 'worked', but clavisd runs 'test'"),
        (renamed, "cluster 'elsewhere'"),
        (smaller, "hosts not in the front: ['h4']"),
        (wider, "host 'h1' has 16 cores in rack 'r1' in the front, 8 in rack 'r1' here"),
    ):
        r = client.post("/api/v1/fronts", json=worked_front(cluster), headers=admin)
        assert r.status_code == 422, r.text
        assert r.json()["detail"].startswith("front is for another cluster: ")
        assert words in r.json()["detail"]
    assert client.get("/api/v1/fronts", headers=admin).json() == []  # nothing stored
    assert client.post("/api/v1/fronts", json=worked_front(), headers=admin).status_code == 200


def test_retention_downsamples_then_drops(client: TestClient, clavisd: Clavisd) -> None:
    now = time.time()
    for i in range(90):  # 90 s of reports, one a second, busy cores rising
        doc = report("h1", [], ts=now - 100 + i, busy=float(i % 8), watts=100.0 + i)
        assert post_report(client, doc).status_code == 202
    store = clavisd.store
    assert store.count(t.host_samples) == 90
    # Everything older than 30 s to 60 s buckets; nothing older than 1000 s is dropped yet.
    changed = store.apply_retention(now, raw_s=30, keep_s=1000, bucket_s=60)
    assert changed > 0
    with store.engine.connect() as conn:
        rows = conn.execute(t.host_samples.select().order_by(t.host_samples.c.ts)).all()
    raw = [r for r in rows if r.resolution_s == 1.0]
    means = [r for r in rows if r.resolution_s == 60]
    assert all(r.ts >= now - 30 for r in raw) and 1 <= len(means) <= 3  # 70 s span 2 or 3 buckets
    total = sum(r.watts for r in raw) + sum(r.watts for r in means)
    assert len(raw) + len(means) < 90 and total > 0
    # Power fitting still works on the downsampled history.
    x, _ = store.power_samples("h1", since=0)
    assert len(x) == len(raw) + len(means)
    store.apply_retention(now + 2000, raw_s=30, keep_s=1000, bucket_s=60)
    assert store.count(t.host_samples) == 0


def test_picks_where_a_method_fails_are_refused_as_the_cli_refuses_them(
    client: TestClient,
) -> None:
    """One rule for `clavis calibrate` and POST /fronts/{id}/picks (issue 15): without a
    method, a method that failed refuses (the thesis system of these picks needs a
    negative weight); naming the other method takes its weights. The API took the
    recommended method's weights before, where the CLI wrote nothing."""
    admin = login(client, "ada")
    front = worked_front()
    base = front["points"][0]
    negative = [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (1.0, 1.0, 1.0)]  # Eq. 5.1: (1, 1, -1)
    front["points"] = [{**base, "id": k, "normalised": {"P": p, "D": d, "C": c, "M": 0.0}}
                       for k, (p, d, c) in enumerate(negative)]  # fmt: skip
    fid = client.post("/api/v1/fronts", json=front, headers=admin).json()["id"]
    url = f"/api/v1/fronts/{fid}/picks"
    r = client.post(url, json={"picks": [0, 1, 2]}, headers=admin)
    assert r.status_code == 422, r.text
    assert "the thesis method failed" in r.json()["detail"]
    assert client.get("/api/v1/weights", headers=admin).json()["source"] == "configured"
    preview = client.post(f"/api/v1/fronts/{fid}/calibrate", json={"picks": [0, 1, 2]},
                          headers=admin).json()  # fmt: skip
    assert preview["refusal"].startswith("the thesis method failed")
    r = client.post(url, json={"picks": [0, 1, 2], "method": "thesis"}, headers=admin)
    assert r.status_code == 422 and "the thesis method failed" in r.json()["detail"]
    r = client.post(url, json={"picks": [0, 1, 2], "method": "inverse"}, headers=admin)
    assert r.status_code == 200, r.text
    assert r.json()["weights"]["method"] == "inverse"
    assert client.get("/api/v1/weights", headers=admin).json()["source"] == "calibrated"
