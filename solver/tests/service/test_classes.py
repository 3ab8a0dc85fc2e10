"""What clavisd treats a container as (issue 13): a container nothing has measured is
``unknown`` (in /containers, the repack snapshot and the advice, where its host is not
``devil-free``), and the user's ``--clavis-class`` travels in the report, is stored,
shows, and overrides the measured class without teaching the application's memory."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from clavis.service import tables as t
from clavis.service.advice import ADVICE_APPS_BYTES, applications
from clavis.service.daemon import Clavisd
from clavis.service.ingest import ClassBook
from clavis.service.rows import AppClassRow
from clavis.service.store import Store

from .helpers import container, login, post_report, report


def _advice(d: Clavisd) -> dict[str, dict[str, Any]]:
    d.publish_advice()
    doc = json.loads(Path(d.config.advice.path).read_text())
    return {n["node"]: n for n in doc["nodes"]}


def _containers(client: TestClient) -> dict[str, dict[str, Any]]:
    view = login(client, "vic")
    return {c["name"]: c for c in client.get("/api/v1/containers", headers=view).json()}


def test_a_container_without_a_measurement_is_unknown_not_a_turtle(
    client: TestClient, clavisd: Clavisd
) -> None:
    now = time.time()
    layout = {
        "h1": [container("n1", mpki=None)],
        "h2": [container("n2", job="j2", mpki=1.0)],
        "h3": [container("n3", job="j3", mpki=None), container("n4", job="j4", mpki=30.0)],
    }
    for i in range(3):
        for host, cs in layout.items():
            assert post_report(client, report(host, cs, ts=now - 10 + i)).status_code == 202
    shown = {n: (c["effective_class"], c["effective_source"], c["klass"])
             for n, c in _containers(client).items()}  # fmt: skip
    assert shown == {
        "n1": ("unknown", "none", None),
        "n2": ("turtle", "last-sample", None),  # 3 votes: the window has not decided yet
        "n3": ("unknown", "none", None),
        "n4": ("devil", "last-sample", None),
    }
    # The solver places an unknown container as a turtle, and the snapshot says which.
    snap = clavisd.snapshot(time.time())
    assert snap.unknown == {"n1", "n3"}
    assert snap.workload is not None
    classes = {c.name: c.klass for j in snap.workload.jobs for c in j.containers}
    assert classes == {"n1": "turtle", "n2": "turtle", "n3": "turtle", "n4": "devil"}
    adv = _advice(clavisd)
    assert {n: (a["node_class"], a["contention"]) for n, a in adv.items()} == {
        "n1": ("unknown", "unknown"),  # not devil-free: nothing says n1 is not a devil
        "n2": ("turtle", "devil-free"),
        "n3": ("unknown", "ok"),  # a known devil decides the host's contention
        "n4": ("devil", "ok"),
    }
    # A measurement makes it known, and the advice is rebuilt for it.
    assert post_report(client, report("h1", [container("n1", mpki=2.0)])).status_code == 202
    assert _advice(clavisd)["n1"] == {**adv["n1"], "node_class": "turtle",
                                      "contention": "devil-free"}  # fmt: skip


def _hinted(name: str, hint: str | None, mpki: float, app: str) -> dict[str, Any]:
    c = container(name, job="7", mpki=mpki, app=app)
    if hint is not None:
        c["class_hint"] = hint
    return c


def test_a_class_hint_is_stored_shown_and_overrides_the_measured_class(
    client: TestClient, clavisd: Clavisd
) -> None:
    t0 = time.time() - 30
    for i in range(8):  # 8 turtle votes: measured turtle, and the app remembered as one
        doc = report("h1", [_hinted("n1", "devil", 1.0, "1000:stream.sh")], ts=t0 + i)
        assert post_report(client, doc).status_code == 202, doc
    c = _containers(client)["n1"]
    assert (c["klass"], c["class_source"], c["class_hint"]) == ("turtle", "samples", "devil")
    assert (c["effective_class"], c["effective_source"]) == ("devil", "hint")
    # The memory learns from measurements only: the hint does not teach the next job.
    assert clavisd.store.app_classes() == {"1000:stream.sh": "turtle"}
    (job,) = clavisd.store.jobs()
    assert job.klass == "turtle"
    # Repacking and the advice use the hint.
    snap = clavisd.snapshot(time.time())
    assert snap.workload is not None and snap.workload.jobs[0].containers[0].klass == "devil"
    adv = _advice(clavisd)
    assert (adv["n1"]["node_class"], adv["n1"]["contention"]) == ("devil", "ok")
    # The next job on the node, without a hint: the class the application's measurements
    # taught (memory), not the last job's hint.
    nxt = {**_hinted("n1", None, 1.0, "1000:stream.sh"), "job": "8"}
    doc = report("h1", [nxt], ts=t0 + 9)
    assert post_report(client, doc).status_code == 202
    c = _containers(client)["n1"]
    assert (c["class_hint"], c["effective_class"], c["effective_source"]) == (
        None, "turtle", "memory")  # fmt: skip
    assert _advice(clavisd)["n1"]["node_class"] == "turtle"


def test_a_hint_in_a_version_1_report_is_refused(client: TestClient) -> None:
    doc = {**report("h1", [_hinted("n1", "devil", 1.0, "1000:a")]), "schema_version": 1}
    body = post_report(client, doc)
    assert body.status_code == 422 and "need schema_version 2" in body.json()["detail"]
    bad = report("h1", [_hinted("n1", "angel", 1.0, "1000:a")])
    assert post_report(client, bad).status_code == 422


def test_migration_3_adds_the_hint_column_to_an_older_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    with engine.begin() as conn:  # a store as clavisd made it before migration 3
        t.meta.create_all(conn, tables=[t.schema_version])
        t.meta.create_all(conn, tables=[x for x in t.V1_TABLES if x is not t.containers])
        t.meta.create_all(conn, tables=[t.nonces])
        conn.execute(text(
            "CREATE TABLE containers (name VARCHAR(128) PRIMARY KEY, host VARCHAR(128) NOT "
            "NULL, job VARCHAR(128), app VARCHAR(256), cores INTEGER NOT NULL, memory_bytes "
            "BIGINT NOT NULL, busy_cores FLOAT NOT NULL, intensity_mpki FLOAT, klass "
            "VARCHAR(8), class_source VARCHAR(16) NOT NULL, votes VARCHAR(1000) NOT NULL, "
            "traffic TEXT NOT NULL, updated FLOAT NOT NULL)"
        ))  # fmt: skip
        conn.execute(text("INSERT INTO containers VALUES ('n1', 'h1', NULL, NULL, 2, 1, 0.5, "
                          "NULL, 'devil', 'samples', 'ddddddd', '{}', 1.0)"))  # fmt: skip
        for v, desc, _ in t.MIGRATIONS[:2]:
            conn.execute(t.schema_version.insert().values(version=v, description=desc,
                                                          applied=1.0))  # fmt: skip
    engine.dispose()
    store = Store(url)
    assert store.applied == [v for v, _, _ in t.MIGRATIONS[2:]]  # 3 and any later
    (c,) = store.containers()
    assert (c.klass, c.class_hint) == ("devil", None)
    store.close()


def test_the_application_memory_reaches_the_advice(client: TestClient, clavisd: Clavisd) -> None:
    """A job of application 1000:stream.sh measured a devil (7 of 10), another measured a
    turtle: both are in the advice's apps (schema 2), keyed as select_clavis keys a
    pending job; keys that are no application key (a job id fallback) are left out."""
    t0 = time.time() - 30
    for i in range(8):
        cs = [container("n1", job="11", mpki=20.0, app="1000:stream.sh"),
              container("n2", job="12", mpki=1.0, app="1000:calm.sh"),
              container("n3", job="13", mpki=20.0)]  # fmt: skip
        assert post_report(client, report("h1", cs, ts=t0 + i)).status_code == 202
    assert clavisd.store.app_classes() == {
        "1000:stream.sh": "devil", "1000:calm.sh": "turtle", "13": "devil"}  # fmt: skip
    clavisd.publish_advice()
    doc = json.loads(Path(clavisd.config.advice.path).read_text())
    assert doc["schema_version"] == 2
    assert sorted((a["app"], a["app_class"], a["jobs_seen"]) for a in doc["apps"]) == [
        ("1000:calm.sh", "turtle", 1), ("1000:stream.sh", "devil", 1)]  # fmt: skip
    # A later job of calm.sh turns out a devil: the advice follows (rebuilt for it).
    for i in range(8):
        c = container("n2", job="14", mpki=20.0, app="1000:calm.sh")
        assert post_report(client, report("h1", [c], ts=t0 + 10 + i)).status_code == 202
    clavisd.publish_advice()
    doc = json.loads(Path(clavisd.config.advice.path).read_text())
    apps = {a["app"]: (a["app_class"], a["jobs_seen"]) for a in doc["apps"]}
    # jobs_seen counts class decisions: job 14 started as the remembered turtle, then
    # its votes made it a devil.
    assert apps["1000:calm.sh"] == ("devil", 3)
    assert doc["apps"][0]["app"] == "1000:calm.sh"  # most recently decided first


def test_the_advice_lists_the_newest_applications_that_fit() -> None:
    rows = [{"app": f"1000:job{i}.sh", "klass": "devil" if i % 2 else "turtle",
             "jobs_seen": i + 1, "updated": 100.0 - i} for i in range(10)]  # fmt: skip
    rows.insert(3, {"app": "slurm_script", "klass": "devil", "jobs_seen": 1, "updated": 99.5})
    rows.insert(5, {"app": "1000:open", "klass": None, "jobs_seen": 1, "updated": 99.4})
    got = applications([AppClassRow(**r) for r in rows], budget=4 * 80)  # about 75 bytes each
    assert [(a.app, a.app_class) for a in got] == [
        ("1000:job0.sh", "turtle"), ("1000:job1.sh", "devil"), ("1000:job2.sh", "turtle"),
        ("1000:job3.sh", "devil")]  # fmt: skip
    # Longest names, non-ASCII (escaped when written): the list as written stays within
    # the budget, so the file stays under select_clavis's default size limit.
    big = [{"app": f"{4000000000 + i}:{'é' * 119}", "klass": "devil", "jobs_seen": 10**9,
            "updated": 0.0} for i in range(20000)]  # fmt: skip
    apps = applications([AppClassRow(**r) for r in big])
    written = len(json.dumps([a.model_dump(mode="json") for a in apps]))
    assert 1000 < len(apps) < 20000 and ADVICE_APPS_BYTES * 0.9 < written <= ADVICE_APPS_BYTES


def test_a_migrated_container_keeps_its_jobs_application_and_hint(
    client: TestClient, clavisd: Clavisd
) -> None:
    """The monitor of a node's new host saw no SPANK registration of its job (the job id
    comes from its cgroup scan): the report has the job and no application or class hint.
    clavisd keeps what it stored for that job instead of filing the job under its id and
    dropping the user's --clavis-class."""
    now = time.time() - 20
    on_h1 = _hinted("n1", "turtle", 30.0, "1000:stream-triad")
    on_h1["job"] = "j7"
    for i in range(3):
        r = post_report(client, report("h1", [on_h1], ts=now + i))
        assert r.status_code == 202, r.text
    moved = container("n1", job="j7", mpki=30.0)  # no "app": the new host's view
    assert post_report(client, report("h1", [], ts=now + 4)).status_code == 202
    assert post_report(client, report("h2", [moved], ts=now + 5)).status_code == 202
    row = _containers(client)["n1"]
    assert (row["host"], row["job"], row["app"]) == ("h2", "j7", "1000:stream-triad")
    assert (row["class_hint"], row["effective_class"]) == ("turtle", "turtle")
    jobs = {j.name: j.app for j in Store(clavisd.config.store.url, time.time()).jobs()}
    assert jobs["j7"] == "1000:stream-triad"
    # a clavisd started again on the same store knows it too (ClassBook.load)
    book = ClassBook.load(Store(clavisd.config.store.url, time.time()))
    assert book.job_apps["j7"] == "1000:stream-triad" and book.job_hints["j7"] == "turtle"
    # another job on the node: neither is carried over
    other = container("n1", job="j8", mpki=30.0)
    assert post_report(client, report("h2", [other], ts=now + 6)).status_code == 202
    row = _containers(client)["n1"]
    assert (row["job"], row["app"], row["class_hint"]) == ("j8", "j8", None)
