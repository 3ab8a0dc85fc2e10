"""Pareto search: operators, determinism, a golden front, and the CLI round trip."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import container, host, instance

from clavis.cli import main
from clavis.instance import Instance
from clavis.objectives import violations
from clavis.pareto import (
    CapacityRepair,
    MoveSwapMutation,
    PlacementProblem,
    UniformAssignmentCrossover,
    exact_front,
    make_algorithm,
    pareto_front,
    repair_row,
    seed_placements,
)

ROOT = Path(__file__).resolve().parents[2]
PP = ROOT / "examples" / "parapluie"


def tiny() -> Instance:
    """4 hosts in 2 racks, 8 containers: small enough to enumerate every placement."""
    hosts = [host(f"h{i}", f"r{i // 2}", cores=4, domains=2) for i in range(4)]
    jobs = [
        {"name": "A", "containers": [container("a1", 1, 9), container("a2", 1, 9)],
         "traffic": [{"src": "a1", "dst": "a2", "bytes_per_s": 8.0}]},
        {"name": "B", "containers": [container("b1", 2, 12), container("b2", 1, 0.5)],
         "traffic": [{"src": "b1", "dst": "b2", "bytes_per_s": 3.0}]},
        {"name": "C", "containers": [container("c1", 2, 0.2), container("c2", 2, 7)]},
        {"name": "D", "containers": [container("d1", 1, 0.1), container("d2", 2, 0.3)]},
    ]  # fmt: skip
    return instance(hosts, jobs)


def test_repair_restores_capacity_and_keeps_what_fits() -> None:
    inst = tiny()
    rng = np.random.default_rng(3)
    for _ in range(200):
        row = rng.integers(0, 4, size=8)
        before = row.copy()
        repair_row(inst, row, rng)
        assert violations(inst, tuple(int(h) for h in row)) == []
        if violations(inst, tuple(int(h) for h in before)) == []:
            assert np.array_equal(before, row)  # a valid row is left alone


def test_repair_moves_containers_off_drained_hosts() -> None:
    hosts = [host("up"), {**host("dr"), "state": "drain"}]
    inst = instance(hosts, [{"name": "j", "containers": [container("a"), container("b")]}],
                    current={"a": "dr"})  # fmt: skip
    problem = PlacementProblem(inst)
    X = CapacityRepair()._do(problem, np.array([[1, 1]]), random_state=np.random.default_rng(0))
    assert X.tolist() == [[1, 0]]


def test_crossover_children_take_each_gene_from_a_parent() -> None:
    problem = PlacementProblem(tiny())
    rng = np.random.default_rng(1)
    parents = rng.integers(0, 4, size=(2, 5, 8))
    kids = UniformAssignmentCrossover()._do(problem, parents, random_state=rng)
    assert kids.shape == (2, 5, 8)
    from_a = kids[0] == parents[0]
    assert np.all(from_a | (kids[0] == parents[1]))
    assert np.all(np.where(from_a, kids[1] == parents[1], kids[1] == parents[0]))


def test_mutation_changes_few_genes() -> None:
    problem = PlacementProblem(tiny())
    rng = np.random.default_rng(2)
    X = rng.integers(0, 4, size=(50, 8))
    Y = MoveSwapMutation()._do(problem, X, random_state=rng)
    changed = (X != Y).sum(axis=1)
    assert changed.max() <= 8 and changed.mean() < 4 and changed.sum() > 0


def _run(seed: int) -> tuple[np.ndarray, np.ndarray]:
    inst = tiny()
    problem = PlacementProblem(inst)
    seeds = seed_placements(inst, seed, seed_time=0.2)
    res = pareto_front(problem, make_algorithm("nsga2", 40, seeds, 3), 40, seed)
    return res.X, res.F


def test_same_seed_same_front() -> None:
    x1, f1 = _run(5)
    x2, f2 = _run(5)
    assert np.array_equal(x1, x2) and np.array_equal(f1, f2)


def test_golden_front_on_a_tiny_instance() -> None:
    problem = PlacementProblem(tiny())
    exact = exact_front(problem)
    _, found = _run(7)
    want = {tuple(np.round(f, 9)) for f in exact.F}
    got = {tuple(np.round(f, 9)) for f in found}
    assert got == want, f"missing {want - got}, extra {got - want}"


def test_pareto_and_calibrate_cli_round_trip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    front = tmp_path / "front.json"
    args = ["--cluster", str(PP / "cluster.yaml"), "--workload", str(PP / "representative.yaml")]
    code = main(["pareto", *args, "--population", "40", "--generations", "30", "--seed", "1",
                 "--seed-time", "0.2", "--out", str(front), "--quiet"])  # fmt: skip
    assert code == 0
    doc = json.loads(front.read_text())
    assert doc["kind"] == "clavis.front" and doc["search"]["objectives"] == ["P", "D", "C"]
    assert doc["cluster"]["name"] == "parapluie"  # the inputs are stored for audit
    points = doc["points"]
    assert len(points) >= 3
    # No stored point dominates another.
    vals = [tuple(p["normalised"][k] for k in "PDC") for p in points]
    for a in vals:
        for b in vals:
            assert not (all(x <= y for x, y in zip(a, b, strict=True)) and a != b)
    capsys.readouterr()
    weights = tmp_path / "weights.json"
    ids = ",".join(str(p["id"]) for p in points[:3])
    code = main(["calibrate", "--front", str(front), "--pick", ids, "--method", "inverse",
                 "--out", str(weights)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    w = json.loads(weights.read_text())
    assert w["method"] == "inverse" and w["picks"] == [int(i) for i in ids.split(",")]
    assert sum(w["weights"].values()) == pytest.approx(1.0)
    assert "recommended:" in out
    code = main(["solve", *args, "--weights-file", str(weights), "--time-limit", "5",
                 "--workers", "2", "--quiet"])  # fmt: skip
    assert code == 0


@pytest.mark.parametrize(
    ("picks", "extra", "needle"),
    [
        ("0,1", [], "pick at least 3 schedules, got 2"),
        ("0,1,999", [], "no schedule with id 999"),
        ("0,1,1", [], "schedule 1 is given twice"),
        ("0,x,2", [], "expected comma-separated schedule ids"),
    ],
)
def test_bad_picks_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], picks: str, extra: list[str],
    needle: str,
) -> None:  # fmt: skip
    front = _tiny_front(tmp_path)
    out = tmp_path / "w.json"
    code = main(["calibrate", "--front", str(front), "--pick", picks, "--out", str(out), *extra])
    assert code == 2 and needle in capsys.readouterr().err
    assert not out.exists()


def _tiny_front(tmp_path: Path) -> Path:
    front = tmp_path / "front.json"
    args = ["--cluster", str(PP / "cluster.yaml"), "--workload", str(PP / "representative.yaml")]
    assert main(["pareto", *args, "--population", "20", "--generations", "5",
                 "--seed-time", "0", "--out", str(front), "--quiet"]) == 0  # fmt: skip
    return front


def test_pareto_refuses_bad_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--cluster", str(PP / "cluster.yaml"), "--workload", str(PP / "representative.yaml")]
    out = tmp_path / "f.json"
    for extra, needle in [
        (["--with-migration"], "--with-migration needs --current"),
        (["--population", "2"], "--population must be >= 4"),
    ]:
        code = main(["pareto", *args, *extra, "--out", str(out), "--quiet"])
        assert code == 2 and needle in capsys.readouterr().err
        assert not out.exists()


def _front_of(tmp_path: Path, vectors: list[tuple[float, float, float]]) -> Path:
    """A front file whose schedules have the given normalised (P, D, C)."""
    front = _tiny_front(tmp_path)
    doc = json.loads(front.read_text())
    base = doc["points"][0]
    doc["points"] = [
        {**base, "id": k, "normalised": {"P": p, "D": d, "C": c, "M": 0.0}}
        for k, (p, d, c) in enumerate(vectors, start=1)
    ]
    front.write_text(json.dumps(doc))
    return front


# Three collinear schedules: the thesis system is rank-deficient.
COLLINEAR = [(0.1 * k, 0.2 * k, 0.3 * k) for k in (1, 2, 3)]
# Solving Eq. 5.1 for these gives weights (1, 1, -1): no positive weighting fits them.
NEGATIVE = [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (1.0, 1.0, 1.0)]


@pytest.mark.parametrize(
    ("vectors", "method", "needle"),
    [
        (COLLINEAR, ["--method", "thesis"], "rank-deficient"),
        (COLLINEAR, [], "rank-deficient"),
        (NEGATIVE, [], "negative weights"),
        (NEGATIVE, ["--method", "thesis"], "negative weights"),
        ([(0.1, 0.2, 0.3), (0.1, 0.2, 0.3), (0.5, 0.1, 0.2)], [], "identical objective values"),
    ],
)
def test_a_method_that_fails_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], vectors: list[tuple[float, float, float]],
    method: list[str], needle: str,
) -> None:  # fmt: skip
    front = _front_of(tmp_path, vectors)
    out = tmp_path / "w.json"
    code = main(["calibrate", "--front", str(front), "--pick", "1,2,3", *method,
                 "--out", str(out)])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 2 and needle in captured.err, captured.err
    assert not out.exists()
    if (
        not method and "identical" not in needle
    ):  # both outcomes were shown before the refusal, and the way out named
        assert "thesis   failed" in captured.out and "inverse " in captured.out
        assert "--method inverse" in captured.err


def test_the_other_method_is_written_when_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    front = _front_of(tmp_path, NEGATIVE)
    out = tmp_path / "w.json"
    code = main(["calibrate", "--front", str(front), "--pick", "1,2,3", "--method", "inverse",
                 "--out", str(out)])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert doc["method"] == "inverse" and doc["recommended"] == "inverse"
    assert {o["method"]: o["error"] is not None for o in doc["outcomes"]} == {
        "thesis": True,
        "inverse": False,
    }


def test_progress_reports_generations_and_the_final_hypervolume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    front = tmp_path / "front.json"
    args = ["--cluster", str(PP / "cluster.yaml"), "--workload", str(PP / "representative.yaml")]
    assert main(["pareto", *args, "--population", "20", "--generations", "20",
                 "--seed-time", "0", "--out", str(front)]) == 0  # fmt: skip
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("generation ")]
    # Not a terminal: a line every 10% of the generations, the last one always.
    numbers = [int(ln.split()[1].split("/")[0]) for ln in lines]
    assert numbers == list(range(2, 21, 2)), lines
    assert all(ln.split()[1].endswith("/20") for ln in lines)
    hvs = [float(ln.split("hypervolume ")[1].split()[0]) for ln in lines]
    assert hvs == sorted(hvs), "hypervolume of the archive never falls"
    final = json.loads(front.read_text())["search"]["hypervolume"]
    assert hvs[-1] == pytest.approx(final, abs=5e-6)


def test_front_with_migration_has_four_objectives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    worked = ROOT / "examples" / "worked"
    front = tmp_path / "front.json"
    code = main(["pareto", "--cluster", str(worked / "cluster.yaml"),
                 "--workload", str(worked / "workload.yaml"),
                 "--current", str(worked / "current.yaml"), "--with-migration",
                 "--population", "20", "--generations", "15", "--seed-time", "0",
                 "--out", str(front), "--quiet"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    doc = json.loads(front.read_text())
    assert doc["search"]["objectives"] == ["P", "D", "C", "M"]
    assert doc["current"] is not None
    moved = [p for p in doc["points"] if p["raw"]["M"] > 0]
    stayed = [p for p in doc["points"] if p["raw"]["M"] == 0]
    # Staying put costs nothing to move, so the current placement's M = 0 corner is on
    # the front, and so is at least one schedule that pays M for a better P, D or C.
    assert stayed and moved
    vals = [tuple(p["normalised"][k] for k in "PDCM") for p in doc["points"]]
    for a in vals:
        for b in vals:
            assert not (all(x <= y for x, y in zip(a, b, strict=True)) and a != b)
