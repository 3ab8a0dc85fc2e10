"""`clavis solve` / `evaluate` / `schema` end to end through the real entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from clavis.cli import SCHEMAS, _Ticker, main
from clavis.realistic import RealisticSpec, generate

ROOT = Path(__file__).resolve().parents[2]
PP = ROOT / "examples" / "parapluie"


def test_solve_writes_a_placement_that_round_trips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "placement.json"
    args = ["--cluster", str(PP / "cluster.yaml"), "--workload", str(PP / "workload.yaml")]
    code = main(["solve", *args, "--weights", "0.15,1.94,0.68", "--time-limit", "20",
                 "--workers", "2", "--out", str(out)])  # fmt: skip
    printed = capsys.readouterr()
    assert code == 0
    doc = json.loads(out.read_text())
    sol = doc["solution"]
    assert sol["method"] == "cpsat" and sol["status"] in {"OPTIMAL", "FEASIBLE"}
    assert set(doc["assignment"]) == {f"{j}{k}" for j in "abdefghj" for k in (0, 1)}
    assert sol["bound"] <= sol["F"] + 1e-9
    assert "parapluie-8" in printed.out and "F = " in printed.out
    assert "solving with cpsat" in printed.err
    # Every devil is uncontended under these devil-averse weights.
    assert sol["raw"]["D"] == 0
    # The written placement scores the same through `evaluate` ...
    code = main(["evaluate", *args, "--weights", "0.15,1.94,0.68", "--placement", str(out)])
    assert code == 0
    assert f"F = {sol['F']:.6f}" in capsys.readouterr().out
    # ... and, used as the current placement with a migration weight, costs nothing to keep.
    out2 = tmp_path / "again.json"
    code = main(
        [
            "solve",
            *args,
            "--current",
            str(out),
            "--weights",
            "0.15,1.94,0.68,5",
            "--time-limit",
            "20",
            "--workers",
            "2",
            "--quiet",
            "--out",
            str(out2),
        ]
    )
    again = json.loads(out2.read_text())["solution"]
    assert code == 0 and again["raw"]["M"] == 0 and again["raw"]["D"] == 0


def test_console_script_runs(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "clavis"
    r = subprocess.run([str(exe), "solve", "--cluster", str(PP / "cluster.yaml"), "--workload",
                        str(PP / "workload.yaml"), "--weights", "1,0,0", "--method", "corerr"],
                       capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "method corerr" in r.stdout


def test_published_schemas_match_the_models() -> None:
    for kind, model in SCHEMAS.items():
        published = json.loads((ROOT / "docs" / "schema" / f"{kind}.schema.json").read_text())
        assert published == model.model_json_schema(by_alias=True), (
            f"docs/schema/{kind}.schema.json is stale: run `make schemas`"
        )


def test_long_solve_prints_a_heartbeat(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_Ticker, "HEARTBEAT", 0.3)
    code = main(["solve", "--cluster", str(PP / "cluster.yaml"), "--workload",
                 str(PP / "workload.yaml"), "--weights", "1,1,1", "--method", "random",
                 "--time-limit", "1.5"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0
    assert "searching, best F" in err, err


def test_a_reader_that_stops_early_costs_neither_the_answer_nor_a_traceback(
    tmp_path: Path,
) -> None:
    # `clavis solve ... | head -1`: the reader closes the pipe after the summary line, and
    # the host table of 256 hosts (beyond a pipe's 64 KiB) is still to come.
    files = {p.stem: p for p in generate(RealisticSpec(hosts=256, seed=4)).write(tmp_path)}
    out = tmp_path / "placement.json"
    cmd = [sys.executable, "-m", "clavis.cli", "solve", "--cluster", str(files["cluster"]),
           "--workload", str(files["workload"]), "--weights", "1,1,1", "--time-limit", "3",
           "--quiet", "--out", str(out)]  # fmt: skip
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert child.stdout is not None and child.stderr is not None
    first = child.stdout.readline().decode()
    child.stdout.close()
    err = child.stderr.read().decode()
    code = child.wait(timeout=120)
    assert first.startswith("method cpsat")
    assert "Traceback" not in err, err
    assert code == 141
    assert json.loads(out.read_text())["solution"]["method"] == "cpsat"
