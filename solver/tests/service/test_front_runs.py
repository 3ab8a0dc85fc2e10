"""Fronts of the live cluster started, streamed and cancelled through a real clavisd app
(issue 16's back end), the calibration preview, the advice's state and /me."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from clavis.model import Front
from clavis.service.api import serve
from clavis.service.config import ConfigError, load_config
from clavis.service.daemon import Clavisd

from .helpers import contended, login, store_rows, worked_front, write_setup

SMALL = {"population": 8, "generations": 4, "seed_time": 0, "seed": 3}


def _events(client: TestClient, run_id: int, headers: dict[str, str]) -> list[tuple[str, Any]]:
    """Read the run's SSE stream to its end event."""
    out: list[tuple[str, Any]] = []
    with client.stream("GET", f"/api/v1/front-runs/{run_id}/events", headers=headers) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        event = ""
        for line in r.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                out.append((event, json.loads(line[6:])))
    return out


def _wait(client: TestClient, run_id: int, headers: dict[str, str]) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run: dict[str, Any] = client.get(f"/api/v1/front-runs/{run_id}", headers=headers).json()
        if run["state"] != "running":
            return run
        time.sleep(0.05)
    raise AssertionError(f"front run {run_id} still running after 60 s")


def test_a_run_streams_its_generations_and_stores_the_front(client: TestClient) -> None:
    admin, view = login(client, "ada"), login(client, "vic")
    r = client.post("/api/v1/front-runs", json=SMALL, headers=admin)
    assert r.status_code == 409 and "no container has reported" in r.json()["detail"]
    contended(client)  # a1, b1 on h1 and a2, b2 on h2, devils; h3, h4 idle
    assert client.post("/api/v1/front-runs", json=SMALL, headers=view).status_code == 403
    r = client.post("/api/v1/front-runs", json=SMALL, headers=admin)
    assert r.status_code == 202, r.text
    run = r.json()
    assert run["state"] == "running" and run["user"] == "ada" and run["front_id"] is None
    events = _events(client, run["id"], view)  # a viewer may watch
    progress = [d for e, d in events if e == "progress"]
    assert [g["generation"] for g in progress] == [1, 2, 3, 4]
    assert all(a["evaluations"] < b["evaluations"] for a, b in itertools.pairwise(progress))
    assert all(g["hypervolume"] > 0 and g["front_size"] >= 1 for g in progress)
    # The archive only grows better: its hypervolume never falls.
    hv = [g["hypervolume"] for g in progress]
    assert all(a <= b + 1e-12 for a, b in itertools.pairwise(hv))
    kind, end = events[-1]
    assert kind == "end" and end["state"] == "done" and end["front_id"] >= 1
    assert end["last"] == progress[-1]
    # The stored front is the live cluster's: its containers and current placement.
    doc = client.get(f"/api/v1/fronts/{end['front_id']}", headers=view)
    assert doc.status_code == 200
    front = Front.model_validate(doc.json())
    assert front.current is not None
    assert front.current.assignment == {"a1": "h1", "b1": "h1", "a2": "h2", "b2": "h2"}
    assert front.search.generations == 4 and front.search.population == 8
    assert len(front.points) == progress[-1]["front_size"]
    listed = client.get("/api/v1/fronts", headers=view).json()
    assert [f["id"] for f in listed] == [end["front_id"]]
    assert client.get("/api/v1/front-runs", headers=view).json()[0]["state"] == "done"
    # An ended run's stream answers at once with its end.
    assert _events(client, run["id"], view)[-1][1]["state"] == "done"
    assert client.get("/api/v1/fronts/99", headers=view).status_code == 404


def test_one_run_at_a_time_and_cancel(client: TestClient) -> None:
    admin, view = login(client, "ada"), login(client, "vic")
    contended(client)
    long = {**SMALL, "generations": 2000}
    run = client.post("/api/v1/front-runs", json=long, headers=admin).json()
    r = client.post("/api/v1/front-runs", json=SMALL, headers=admin)
    assert r.status_code == 409 and f"front run {run['id']} is in progress" in r.json()["detail"]
    assert client.post(f"/api/v1/front-runs/{run['id']}/cancel", headers=view).status_code == 403
    r = client.post(f"/api/v1/front-runs/{run['id']}/cancel", headers=admin)
    assert r.status_code == 200, r.text
    done = _wait(client, run["id"], view)
    assert done["state"] == "cancelled" and done["front_id"] is None
    assert done["last"]["generation"] < 2000
    assert client.get("/api/v1/fronts", headers=view).json() == []  # nothing stored
    r = client.post(f"/api/v1/front-runs/{run['id']}/cancel", headers=admin)
    assert r.status_code == 409 and "cancelled, not running" in r.json()["detail"]
    assert client.post("/api/v1/front-runs/7/cancel", headers=admin).status_code == 404
    # Free again: the next run starts.
    again = client.post("/api/v1/front-runs", json=SMALL, headers=admin)
    assert again.status_code == 202 and again.json()["id"] == run["id"] + 1
    assert _wait(client, again.json()["id"], view)["state"] == "done"


@pytest.mark.parametrize("bad", [{"population": 2}, {"generations": 0}, {"seed_time": -1},
                                 {"algorithm": "nsga9"}, {"extra": 1}])  # fmt: skip
def test_bad_settings_are_refused(client: TestClient, bad: dict[str, Any]) -> None:
    r = client.post("/api/v1/front-runs", json=bad, headers=login(client, "ada"))
    assert r.status_code == 422 and next(iter(bad)) in r.text


def test_calibration_preview_stores_nothing(client: TestClient, clavisd: Clavisd) -> None:
    admin, view = login(client, "ada"), login(client, "vic")
    fid = client.post("/api/v1/fronts", json=worked_front(), headers=admin).json()["id"]
    before = store_rows(clavisd.config.store.url)
    r = client.post(f"/api/v1/fronts/{fid}/calibrate", json={"picks": [0, 1, 2]}, headers=view)
    assert r.status_code == 200, r.text
    p = r.json()
    assert [o["method"] for o in p["outcomes"]] == ["thesis", "inverse"]
    thesis = p["outcomes"][0]["weights"]
    assert all(abs(thesis[k] - 1 / 3) < 1e-6 for k in "PDC") and p["refusal"] is None
    assert p["recommended"] in ("thesis", "inverse") and p["reason"]
    assert store_rows(clavisd.config.store.url) == before
    # The corner and the middle: the thesis system is solvable but the preview shows
    # whatever each method says; a refusal names the failing method.
    for picks, words in (([0, 1, 9], "no schedule with id 9"), ([0, 0, 1], "picked twice")):
        r = client.post(f"/api/v1/fronts/{fid}/calibrate", json={"picks": picks}, headers=view)
        assert r.status_code == 422 and words in r.json()["detail"]
    r = client.post("/api/v1/fronts/42/calibrate", json={"picks": [0, 1, 2]}, headers=view)
    assert r.status_code == 404
    assert client.post(f"/api/v1/fronts/{fid}/calibrate", json={"picks": [0, 1]},
                       headers=view).status_code == 422  # fmt: skip


def test_advice_state_and_me(client: TestClient, clavisd: Clavisd) -> None:
    view = login(client, "vic")
    r = client.get("/api/v1/advice", headers=view).json()
    assert r["state"] == "missing" and r["nodes"] == 0
    contended(client)
    clavisd.publish_advice()
    r = client.get("/api/v1/advice", headers=view).json()
    assert r["state"] == "fresh" and r["nodes"] == 4 and 0 <= r["age_s"] < 60
    me = client.get("/api/v1/me", headers=view).json()
    assert me["user"] == "vic" and me["role"] == "viewer" and me["expires"] > time.time()
    assert client.get("/api/v1/me", headers=login(client, "ada")).json()["role"] == "admin"
    assert client.get("/api/v1/me").status_code == 401
    assert client.get("/api/v1/me", headers={"Authorization": "Bearer nope"}).status_code == 401


def test_the_ui_is_served_when_configured(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text("<title>vismon</title>")
    (dist / "assets" / "app.js").write_text("console.log(1)")
    extra = "[repack]\ninterval_s = 0\n"
    cfg = write_setup(tmp_path, extra=extra)
    text = cfg.read_text().replace("[server]\n", f'[server]\nui_dir = "{dist}"\n')
    cfg.write_text(text)
    d = Clavisd(load_config(cfg))
    d.ingestor.start()
    try:
        with TestClient(serve(d)) as c:
            assert "vismon" in c.get("/ui/").text
            assert c.get("/ui/assets/app.js").text == "console.log(1)"
            r = c.get("/", follow_redirects=False)
            assert r.status_code in (302, 307) and r.headers["location"] == "/ui/"
            assert c.get("/api/v1/health").status_code == 200
    finally:
        d.stop()
    (dist / "index.html").unlink()
    with pytest.raises(ConfigError, match=r"no index\.html"):
        load_config(cfg)


def test_history_of_calibrations_and_class_changes(client: TestClient) -> None:
    admin, view = login(client, "ada"), login(client, "vic")
    assert client.get("/api/v1/history/calibrations", headers=view).json() == []
    fid = client.post("/api/v1/fronts", json=worked_front(), headers=admin).json()["id"]
    for picks in ([0, 1, 2], [0, 1, 3]):
        r = client.post(f"/api/v1/fronts/{fid}/picks", json={"picks": picks, "method": "inverse"},
                        headers=admin)  # fmt: skip
        assert r.status_code == 200, r.text
    cal = client.get("/api/v1/history/calibrations", headers=view).json()
    assert [c["picks"] for c in cal] == [[0, 1, 3], [0, 1, 2]]  # newest first
    assert all(c["user"] == "ada" and c["method"] == "inverse" for c in cal)
    current = client.get("/api/v1/weights", headers=view).json()
    assert cal[0]["weights"]["C"] == current["C"]
    assert len(client.get("/api/v1/history/calibrations?limit=1", headers=view).json()) == 1
    assert client.get("/api/v1/history/calibrations?limit=0", headers=view).status_code == 422
    contended(client)  # eight devil votes each: a1, b1, a2, b2 become devils
    changes = client.get("/api/v1/history/class-changes", headers=view).json()
    assert {c["container"] for c in changes} == {"a1", "b1", "a2", "b2"}
    assert all(c["klass"] == "devil" for c in changes)
    assert client.get("/api/v1/history/class-changes").status_code == 401


def test_a_run_on_a_stored_fronts_workload(client: TestClient) -> None:
    """A representative workload (a stored front's inputs) instead of the live cluster,
    which here has not reported at all."""
    admin = login(client, "ada")
    source = client.post("/api/v1/fronts", json=worked_front(), headers=admin).json()["id"]
    r = client.post("/api/v1/front-runs", json={**SMALL, "from_front": 99}, headers=admin)
    assert r.status_code == 404 and "no front 99" in r.json()["detail"]
    r = client.post("/api/v1/front-runs", json={**SMALL, "from_front": source,
                                                "with_migration": True}, headers=admin)  # fmt: skip
    assert r.status_code == 409 and "needs a current placement" in r.json()["detail"]
    run = client.post("/api/v1/front-runs", json={**SMALL, "from_front": source}, headers=admin)
    assert run.status_code == 202, run.text
    done = _wait(client, run.json()["id"], admin)
    assert done["state"] == "done" and done["settings"]["from_front"] == source
    doc = client.get(f"/api/v1/fronts/{done['front_id']}", headers=admin).json()
    given = Front.model_validate(worked_front()).workload
    assert doc["workload"] == given.model_dump(mode="json", by_alias=True)
    assert doc["current"] is None and len(doc["points"]) >= 1
