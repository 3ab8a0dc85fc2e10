"""Decision replay (issue 15) in clavisd: every plan it makes keeps the exact documents,
weights and options it gave the solver and the solver's answer (service/replay.py), in
the store with the plan (migration 6) or in a dry run's answer; GET /plans/{id}/replay
gives it out, validated; plans stored before the migration have none and say so. On
SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, delete, select, text

from clavis.placement.guard import default_memory_budget
from clavis.service import replay
from clavis.service import tables as t
from clavis.service.daemon import Clavisd
from clavis.service.replay import ReplayError
from clavis.service.store import Store

from .helpers import contended, login, signed, weights_file


def _repack(client: TestClient, apply: bool) -> dict[str, Any]:
    r = client.post("/api/v1/repack", json={"apply": apply}, headers=login(client, "ada"))
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    assert out["decision"] == "planned", out
    return out


def test_an_applied_plan_keeps_what_the_solver_was_given(
    clavisd: Clavisd, client: TestClient
) -> None:
    contended(client)
    admin = login(client, "ada")
    r = client.post("/api/v1/weights", content=weights_file(0.2, 1.9, 0.7, 0.4), headers=admin)
    assert r.status_code == 200, r.text
    started = time.time()
    plan = _repack(client, apply=True)["plan"]
    r = client.get(f"/api/v1/plans/{plan['id']}/replay", headers=login(client, "vic"))
    assert r.status_code == 200, r.text
    rec = replay.decode(r.text, "answer")
    assert rec.plan == plan["id"] and rec.decision == "planned"
    assert started <= rec.made <= time.time()
    # The documents are the snapshot the pass solved: the store's containers where they run
    assert rec.current.assignment == {c.name: c.host for c in clavisd.store.containers()}
    assert rec.current.assignment == {"a1": "h1", "b1": "h1", "a2": "h2", "b2": "h2"}
    assert {c.klass for j in rec.workload.jobs for c in j.containers} == {"devil"}
    assert [h.name for h in rec.cluster.hosts] == ["h1", "h2", "h3", "h4"]
    # the calibrated weights just posted (id 1), as F used them (scaled to sum 1)
    w, source = clavisd.weights()
    assert (rec.weights.source, rec.weights.id) == ("calibrated", 1) and source == "calibrated"
    assert rec.weights.weights().as_tuple() == pytest.approx(w.as_tuple(), abs=0)
    o = rec.options  # the fixture's [repack], every value resolved
    assert (o.method, o.time_limit_s, o.seed, o.workers, o.deterministic) == (
        "cpsat", 5.0, 0, 1, False)  # fmt: skip
    assert o.memory_limit_bytes == default_memory_budget()
    # The outcome is the solver's placement: the plan's steps lead there, with its F and
    # raw values as the plan's summary states them.
    where = dict(rec.current.assignment)
    for s in plan["steps"]:
        where[s["container"]] = s["target"]
    assert plan["deferred"] == [] and rec.outcome.assignment == where
    assert plan["summary"]["f_solver"] == rec.outcome.F
    assert rec.outcome.raw.model_dump() == plan["summary"]["objectives"]["solver"]
    # exported exactly as stored
    assert r.text == clavisd.store.plan_replay(plan["id"])


def test_replay_record_reads_like_other_plan_reads(clavisd: Clavisd, client: TestClient) -> None:
    contended(client)
    plan_id = _repack(client, apply=True)["plan"]["id"]
    path = f"/api/v1/plans/{plan_id}/replay"
    assert client.get(path).status_code == 401
    assert client.get(path, headers={"Authorization": "Bearer nope"}).status_code == 401
    # a host's agent key reaches /reports only
    r = client.get(path, headers=signed(path, b"", "GET", by="h1"))
    assert r.status_code == 403
    assert client.get(path, headers=signed(path, b"", "GET")).status_code == 200  # admin key
    assert client.get(path, headers=login(client, "ada")).status_code == 200
    r = client.get(f"/api/v1/plans/{plan_id + 1}/replay", headers=login(client, "vic"))
    assert r.status_code == 404 and r.json()["detail"] == f"no plan {plan_id + 1}"


def test_a_dry_run_answers_its_record_and_stores_none(clavisd: Clavisd, client: TestClient) -> None:
    contended(client)
    proposal = _repack(client, apply=False)["proposal"]
    rec = replay.parse(proposal["summary"]["replay"], "proposal")
    assert rec.plan is None and rec.weights.source == "configured" and rec.weights.id is None
    assert proposal["f_solver"] == rec.outcome.F
    assert clavisd.store.count(t.plan_replays) == 0 and clavisd.store.plans() == []
    # the stored plans' summaries do not carry it (it lives in its own table)
    plan = _repack(client, apply=True)["plan"]
    assert "replay" not in plan["summary"]
    assert clavisd.store.count(t.plan_replays) == 1


def test_a_plan_stored_before_migration_6_has_no_record(
    clavisd: Clavisd, client: TestClient
) -> None:
    # as clavisd stored plans before decision replay: the plan and its steps, nothing more
    old = clavisd.store.create_plan(0.5, 0.4, {"message": "old"}, [], time.time())
    assert clavisd.store.plan_replay(old) is None
    r = client.get(f"/api/v1/plans/{old}", headers=login(client, "vic"))
    assert r.status_code == 200 and r.json()["summary"] == {"message": "old"}
    r = client.get(f"/api/v1/plans/{old}/replay", headers=login(client, "vic"))
    assert r.status_code == 404
    assert r.json()["detail"].startswith(f"plan {old} has no replay record: it was stored before")


def test_migration_6_keeps_old_plans_readable(store_url: str) -> None:
    store = Store(store_url)
    old = store.create_plan(0.5, 0.4, {"message": "old"}, [], 1000.0)
    store.close()
    # Back to a store of migration 5: no plan_replays table, no version row 6.
    engine = create_engine(store_url)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE plan_replays"))
        conn.execute(delete(t.schema_version).where(t.schema_version.c.version == 6))
    engine.dispose()
    store = Store(store_url)
    try:
        assert store.applied == [6]
        p = store.plan(old)
        assert p is not None and p.summary == {"message": "old"}
        assert store.plan_replay(old) is None
    finally:
        store.close()


def _record(client: TestClient) -> replay.ReplayRecord:
    contended(client)
    return replay.parse(_repack(client, apply=False)["proposal"]["summary"]["replay"], "x")


def test_a_record_is_validated_when_written_and_a_bad_one_stores_no_plan(
    clavisd: Clavisd, client: TestClient
) -> None:
    rec = _record(client)
    # model_copy skips validation; encode reads back what it would write
    for bad, field in ((rec.model_copy(update={"plan": 0}), "plan"),
                       (rec.model_copy(update={"margin": 2.0}), "margin")):  # fmt: skip
        with pytest.raises(ReplayError, match=f"replay record being written: {field}"):
            replay.encode(bad)
    moved = rec.outcome.model_copy(update={"assignment": {**rec.outcome.assignment, "a1": "h9"}})
    with pytest.raises(ReplayError, match=r"outcome\.assignment names hosts not in the cluster"):
        replay.encode(rec.model_copy(update={"outcome": moved}))

    def bad_record(plan: int) -> str:
        return replay.encode(rec.model_copy(update={"plan": -plan}))

    # The plan and its record are one transaction: a record that fails leaves no plan.
    with pytest.raises(ReplayError):
        clavisd.store.create_plan(0.5, 0.4, {}, [], time.time(), replay=bad_record)
    assert clavisd.store.plans() == [] and clavisd.store.count(t.plan_replays) == 0


def test_a_stored_record_is_validated_when_read(clavisd: Clavisd, client: TestClient) -> None:
    contended(client)
    plan_id = _repack(client, apply=True)["plan"]["id"]
    doc = json.loads(clavisd.store.plan_replay(plan_id) or "")
    doc["schema_version"] = 2  # as a newer clavisd might have written it
    with clavisd.store.engine.begin() as conn:
        conn.execute(t.plan_replays.update().where(t.plan_replays.c.plan == plan_id)
                     .values(doc=json.dumps(doc)))  # fmt: skip
        assert conn.execute(select(t.plan_replays.c.doc)).scalar_one() == json.dumps(doc)
    r = client.get(f"/api/v1/plans/{plan_id}/replay", headers=login(client, "vic"))
    assert r.status_code == 409
    assert "schema_version: 2; this clavis reads replay records of schema_version 1" in (
        r.json()["detail"])  # fmt: skip


def test_record_schema_is_published(tmp_path: Path) -> None:
    from clavis.cli import main  # noqa: PLC0415 (the CLI pulls in the whole solver)

    assert main(["schema", "replay", "--write", str(tmp_path)]) == 0
    schema = json.loads((tmp_path / "replay.schema.json").read_text())
    assert schema["properties"]["kind"]["const"] == "clavis.replay"
    assert schema["properties"]["schema_version"]["const"] == 1
    assert {"cluster", "workload", "current", "weights", "options", "outcome"} <= set(
        schema["required"]
    )
