"""`clavis solve --replay` on records clavisd made (issue 15, decision replay): a real
clavisd process plans deterministically, `clavis repack --replay-out` and `clavis plan
export` get the record out and the replay gives the same placement and values; a
wall-clock record is compared on F within the tolerance; altered and bad records are
refused by name (exit 2, nothing written) or not reproduced (exit 1)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from clavis.cli import main
from clavis.documents import load_cluster, load_placement, load_workload
from clavis.instance import build_instance
from clavis.objectives import Weights, score
from clavis.placement import place
from clavis.report import objective_values
from clavis.service import replay
from clavis.service.config import RepackConfig
from clavis.service.repack import solve_options

from .helpers import cluster_doc, contended, contention_reports, login, write_setup
from .process import Daemon, free_port

CLAVIS = str(Path(sys.executable).parent / "clavis")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLAVIS, *args], capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip


@pytest.mark.slow
def test_a_deterministic_plan_of_a_real_clavisd_replays_exactly(tmp_path: Path) -> None:
    port = free_port()
    extra = ("[repack]\ninterval_s = 0\ntime_limit_s = 3\nworkers = 1\ndeterministic = true\n"
             f'[migrator]\naddress = "127.0.0.1:{free_port()}"\ntimeout_s = 1\n')  # fmt: skip
    cfg = write_setup(tmp_path, extra=extra, port=port)
    d = Daemon(cfg, port, tmp_path / "clavisd.log")
    d.start()
    conn = ["--config", str(cfg)]
    try:
        for doc in contention_reports(age=20):
            d.call("POST", "/api/v1/reports", doc)
        # --apply stores the plan (it stays pending: no migrator agent) and its record
        applied = _run("repack", "--apply", "--replay-out", str(tmp_path / "pass.json"), *conn)
        assert applied.returncode == 1 and "no migrator agent answered" in applied.stderr
        (plan,) = d.call("GET", "/api/v1/plans")
        exported = _run("plan", "export", str(plan["id"]), "--out", str(tmp_path / "r.json"),
                        *conn)  # fmt: skip
        assert exported.returncode == 0, exported.stderr
        # A dry run's record (not stored): the same state, solved deterministically again,
        # gives the stored plan's answer.
        dry = _run("repack", "--dry-run", "--replay-out", str(tmp_path / "dry.json"), *conn)
        assert dry.returncode == 0 and "dry run: nothing stored" in dry.stdout, dry.stderr
        nowhere = _run("repack", "--replay-out", "/nonexistent/r.json", *conn)
        assert nowhere.returncode == 2
        assert "--replay-out: directory /nonexistent does not exist" in nowhere.stderr
        assert len(d.call("GET", "/api/v1/plans")) == 1
        missing = _run("plan", "export", "99", "--out", str(tmp_path / "none.json"), *conn)
        assert missing.returncode == 2 and "(404): " in missing.stderr and "no plan 99" in (
            missing.stderr)  # fmt: skip
        assert not (tmp_path / "none.json").exists()
    finally:
        d.stop()
    text = (tmp_path / "r.json").read_text()
    assert json.loads(text) == json.loads((tmp_path / "pass.json").read_text())
    rec = replay.decode(text, "r.json")
    assert rec.plan == plan["id"] and rec.options.deterministic
    dry_rec = replay.decode((tmp_path / "dry.json").read_text(), "dry.json")
    assert dry_rec.plan is None and dry_rec.made > rec.made
    assert (dry_rec.current, dry_rec.workload) == (rec.current, rec.workload)
    assert dry_rec.outcome.assignment == rec.outcome.assignment
    assert plan["summary"]["f_solver"] == rec.outcome.F
    # The replay runs apart from clavisd, against the cluster file clavisd reads.
    out = tmp_path / "replayed.json"
    got = _run("solve", "--replay", str(tmp_path / "r.json"), "--cluster",
               str(tmp_path / "cluster.yaml"), "--out", str(out), "--quiet")  # fmt: skip
    assert got.returncode == 0, got.stdout + got.stderr
    assert f"replay of plan {plan['id']}" in got.stdout
    assert "stored placement scored again on the stored inputs: the stored values" in got.stdout
    assert "reproduced: deterministic record, the same placement and P, D, C, M, F" in got.stdout
    assert "note: other software" not in got.stdout
    assert json.loads(out.read_text())["assignment"] == rec.outcome.assignment


def _wall_clock_record(client: TestClient, tmp: Path) -> tuple[Path, dict[str, Any]]:
    contended(client)
    r = client.post("/api/v1/repack", json={"apply": True}, headers=login(client, "ada"))
    assert r.status_code == 200 and r.json()["decision"] == "planned", r.text
    plan_id = r.json()["plan"]["id"]
    r = client.get(f"/api/v1/plans/{plan_id}/replay", headers=login(client, "vic"))
    assert r.status_code == 200, r.text
    path = tmp / "record.json"
    path.write_text(r.text)
    doc: dict[str, Any] = r.json()
    return path, doc


def test_a_wall_clock_record_is_compared_on_f_within_the_tolerance(
    client: TestClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, doc = _wall_clock_record(client, tmp_path)
    assert doc["options"]["deterministic"] is False
    assert main(["solve", "--replay", str(path), "--quiet"]) == 0
    shown = capsys.readouterr().out
    assert "reproduced: wall-clock record, F within 0.01 of the stored F" in shown
    assert "note: the record was made on the wall clock" in shown
    # A record whose outcome is the current placement (scored correctly): the replay
    # finds the plan's better placement, farther than the tolerance from that F.
    rec = replay.parse(doc, "record")
    inst = replay.instance(rec, "record")
    now = score(inst, tuple(h for h in inst.current if h is not None), rec.weights.weights())
    stay = {**doc["outcome"], "assignment": doc["current"]["assignment"], "F": now.F,
            "raw": objective_values(now.raw).model_dump(),
            "normalised": objective_values(now.normalised).model_dump()}  # fmt: skip
    assert now.F - doc["outcome"]["F"] > 0.02  # the plan's gain cleared the margin
    worse = tmp_path / "stay.json"
    worse.write_text(json.dumps({**doc, "outcome": stay}))
    assert main(["solve", "--replay", str(worse), "--quiet"]) == 1
    shown = capsys.readouterr().out
    assert "stored placement scored again on the stored inputs: the stored values" in shown
    assert "not reproduced: wall-clock record, F within 0.01" in shown
    # the recorded outcome gains nothing over the current placement; the replay does
    assert f"recorded F {now.F:.6f} (gain 0.000000)" in shown
    assert "repack.margin 0.02: the replay's placement would clear it too" in shown
    assert "4 containers placed elsewhere" in shown or "2 containers placed elsewhere" in shown
    assert main(["solve", "--replay", str(worse), "--quiet", "--tolerance", "1"]) == 0
    assert "reproduced: wall-clock record, F within 1 of the stored F" in capsys.readouterr().out
    # A record made with another OR-Tools says so (the answer may differ with it).
    older = tmp_path / "older.json"
    older.write_text(json.dumps({**doc, "software": {**doc["software"], "ortools": "0.0"}}))
    assert main(["solve", "--replay", str(older), "--quiet"]) == 0
    shown = capsys.readouterr().out
    here = version("ortools")
    assert f"note: other software than the record's (ortools 0.0 recorded, {here} here)" in shown
    # An outcome whose values were altered: the stored placement scores otherwise.
    altered = tmp_path / "altered.json"
    altered.write_text(json.dumps({**doc, "outcome": {**doc["outcome"], "F": 0.001}}))
    assert main(["solve", "--replay", str(altered), "--quiet"]) == 1
    shown = capsys.readouterr().out
    assert "scored again on the stored inputs: DIFFERENT values" in shown
    assert "not reproduced: the stored placement scores differently" in shown


def _bad(doc: dict[str, Any], **change: Any) -> dict[str, Any]:
    """A copy of ``doc`` with ``a__b=v`` setting doc["a"]["b"] to v."""
    out: dict[str, Any] = json.loads(json.dumps(doc))
    for dotted, value in change.items():
        node = out
        *parents, last = dotted.split("__")
        for p in parents:
            node = node[p]
        node[last] = value
    return out


def test_bad_records_exit_2_naming_the_file_and_field_and_write_nothing(
    client: TestClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, doc = _wall_clock_record(client, tmp_path)
    other = cluster_doc()
    other["name"] = "elsewhere"
    wider = cluster_doc()
    wider["hosts"][0]["cores"] = 16
    wider["hosts"][0]["domains"]["cores_per_domain"] = 8
    for name, cluster in (("other.yaml", other), ("wider.yaml", wider)):
        (tmp_path / name).write_text(yaml.safe_dump(cluster))
    drained = [{**h, "state": "drain"} if h["name"] == "h3" else h
               for h in doc["cluster"]["hosts"]]  # fmt: skip
    plan_doc = {"id": 1, "state": "pending", "steps": [], "summary": {}}
    cases: list[tuple[str, Any, list[str], str]] = [
        ("missing.json", None, [], "missing.json: cannot read: No such file or directory"),
        ("v2.json", _bad(doc, schema_version=2), [],
         "v2.json: schema_version: 2; this clavis reads replay records of schema_version 1"),
        ("front.json", _bad(doc, kind="clavis.front"), [],
         "front.json: kind: 'clavis.front' is not a replay record"),
        ("plan.json", plan_doc, [], "plan.json: this is a plan (GET /api/v1/plans/ID), not"),
        ("other.json", doc, ["--cluster", str(tmp_path / "other.yaml")],
         "other.json: cluster: the record is for another cluster: cluster 'test', but "
         f"--cluster {tmp_path / 'other.yaml'} names 'elsewhere'"),
        ("wider.json", doc, ["--cluster", str(tmp_path / "wider.yaml")],
         "wider.json: cluster: the record is for another cluster: host 'h1' has 8 cores in "
         "rack 'r1' in the record, 16 in rack 'r1' here"),
        ("stray.json", _bad(doc, outcome__assignment={**doc["outcome"]["assignment"],
                                                      "a1": "h9"}), [],
         "stray.json: outcome.assignment names hosts not in the cluster: ['h9']"),
        ("workers.json", _bad(doc, options__workers="1"), [],
         "workers.json: options.workers: Input should be a valid integer"),
        ("nan.json", _bad(doc, outcome__F=float("nan")), [],
         "nan.json: outcome.F: Input should be a finite number"),
        ("method.json", _bad(doc, options__method="magic"), [],
         "method.json: options: method 'magic' is not one of"),
        ("drained.json", _bad(_bad(doc, cluster__hosts=drained),
                              outcome__assignment={**doc["outcome"]["assignment"], "a1": "h3"}),
         [], "drained.json: outcome.assignment: container 'a1' on host 'h3' which is drain"),
        ("record.json", None, ["--workload", str(path)],
         "--replay takes the documents, weights and options from the record; drop --workload"),
    ]  # fmt: skip
    for name, content, flags, message in cases:
        target = tmp_path / name
        if content is not None:
            target.write_text(json.dumps(content))
        out = tmp_path / f"out-{name}"
        code = main(["solve", "--replay", str(target), "--out", str(out), "--quiet", *flags])
        err = capsys.readouterr().err
        assert code == 2, (name, err)
        assert message in err, (name, err)
        assert not out.exists(), name
    # A wrong flag beside --replay, and --tolerance without it
    assert main(["solve", "--replay", str(path), "--tolerance", "-1"]) == 2
    assert "--tolerance must be a non-negative number" in capsys.readouterr().err
    assert main(["solve", "--cluster", "c.yaml", "--workload", "w.yaml", "--weights", "1,1,1",
                 "--tolerance", "0.1"]) == 2  # fmt: skip
    assert "--tolerance is for --replay" in capsys.readouterr().err
    assert main(["solve", "--weights", "1,1,1"]) == 2
    assert "solve needs --cluster, --workload (or --replay RECORD)" in capsys.readouterr().err


@pytest.mark.slow
def test_a_deterministic_record_of_a_larger_cluster_replays_in_another_process(
    tmp_path: Path,
) -> None:
    """48 hosts with a current placement, cut off by the deterministic budget before it is
    proven: the replay, in another process, still ends on the recorded placement."""
    assert main(["generate", "--hosts", "48", "--seed", "5", "--current",
                 "--out", str(tmp_path)]) == 0  # fmt: skip
    cluster = load_cluster(tmp_path / "cluster.json")
    workload = load_workload(tmp_path / "workload.json")
    current = load_placement(tmp_path / "current.json")
    inst = build_instance(cluster, workload, current)
    weights = Weights(0.15, 1.94, 0.68, 0.5)
    cfg = RepackConfig(time_limit_s=1.0, workers=1, deterministic=True)
    options = solve_options(cfg, tuple(h for h in inst.current if h is not None))
    result = place("cpsat", inst, weights, options)
    assert result.status == "FEASIBLE" and result.score is not None
    record = replay.record_of(
        cluster=cluster, workload=workload, current=current, weights=weights,
        weights_source="configured", weights_id=None, method="cpsat", options=options,
        result=result, decision="planned", margin=0.02, made=1e9,
    )  # fmt: skip
    moved = sum(a != b for a, b in zip(result.assignment or (), inst.current, strict=True))
    assert moved > 0  # the recorded answer is not simply the warm start
    path = tmp_path / "record.json"
    path.write_text(replay.encode(record))
    got = _run("solve", "--replay", str(path), "--quiet")
    assert got.returncode == 0, got.stdout + got.stderr
    assert f"placement: the same ({len(inst.containers)} containers" in got.stdout
    assert "reproduced: deterministic record" in got.stdout
