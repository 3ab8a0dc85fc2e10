"""Bad input: a clear message naming the field and value, exit code 2, nothing written."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from clavis.cli import main

EX = Path(__file__).resolve().parents[2] / "examples" / "worked"


def _base() -> tuple[dict[str, Any], dict[str, Any]]:
    return (
        yaml.safe_load((EX / "cluster.yaml").read_text()),
        yaml.safe_load((EX / "workload.yaml").read_text()),
    )


def _solve(tmp: Path, cluster: Any, workload: Any, *extra: str) -> tuple[int, Path]:
    (tmp / "c.json").write_text(json.dumps(cluster))
    (tmp / "w.json").write_text(json.dumps(workload))
    out = tmp / "out.json"
    code = main([
        "solve", "--cluster", str(tmp / "c.json"), "--workload", str(tmp / "w.json"),
        "--weights", "1,1,1", "--time-limit", "5", "--quiet", "--out", str(out), *extra,
    ])  # fmt: skip
    return code, out


def _mutate(path: str, value: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    cluster, workload = _base()
    doc = {"cluster": cluster, "workload": workload}
    *parents, leaf = path.split("/")
    node: Any = doc
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    if value is _DELETE:
        del node[leaf]
    elif isinstance(node, list):
        node[int(leaf)] = value
    else:
        node[leaf] = value
    return doc["cluster"], doc["workload"]


_DELETE = object()

CASES = [
    ("cluster/hosts/1/cores", -2, ["hosts[1](h2).cores", "-2"]),
    ("cluster/hosts/1/name", "h1", ["duplicate host name 'h1'"]),
    ("cluster/hosts/0/domains/count", 3, ["domains.count * domains.cores_per_domain = 12"]),
    ("cluster/hosts/0/power/peak_w", 50, ["peak_w (50.0) is below idle_w (100.0)"]),
    ("cluster/hosts/0/colour", "red", ["hosts[0](h1).colour", "Extra inputs"]),
    ("cluster/links/cross_rack", 0.5, ["cross_rack (0.5) must not be cheaper"]),
    ("cluster/hosts", [], ["hosts", "at least 1"]),
    ("workload/jobs/0/containers/0/intensity_mpki", float("nan"), ["intensity_mpki"]),
    ("workload/jobs/0/containers/0/cores", 64, ["x1", "cores = 64 is larger than every host"]),
    ("workload/jobs/1/traffic/0/dst", "ghost", ["traffic[0].dst = 'ghost'", "job 'Y'"]),
    ("workload/jobs/2/containers/0/name", "x1", ["duplicate container name 'x1'"]),
    ("workload/jobs/2/name", "X", ["duplicate job name 'X'"]),
    ("workload/jobs/0/containers/0/memory_bytes", _DELETE, ["memory_bytes: field required"]),
    ("workload/jobs/0/containers/0/class", "gremlin", ["class", "gremlin"]),
    ("workload/schema_version", 7, ["schema_version", "7"]),
    ("workload/jobs/0/all_to_all_bytes_per_s", -1.0, ["all_to_all_bytes_per_s", "-1"]),
    ("workload/jobs/0/all_to_all_bytes_per_s", float("nan"), ["all_to_all_bytes_per_s"]),
]


@pytest.mark.parametrize(("path", "value", "needles"), CASES, ids=[c[0] for c in CASES])
def test_bad_document_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], path: str, value: Any, needles: list[str]
) -> None:
    cluster, workload = _mutate(path, value if value is _DELETE else copy.deepcopy(value))
    code, out = _solve(tmp_path, cluster, workload)
    err = capsys.readouterr().err
    assert code == 2, err
    assert not out.exists()
    for needle in needles:
        assert needle in err, err


def test_current_placement_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster, workload = _base()
    for assignment, needle in [
        ({"x1": "nowhere"}, "unknown host 'nowhere'"),
        ({"ghost": "h1"}, "unknown container 'ghost'"),
        ({"y2": "h1", "z1": "h1", "x1": "h1"}, "host 'h1' holds 10 cores"),
    ]:
        cur = tmp_path / "cur.json"
        cur.write_text(json.dumps({"schema_version": 1, "assignment": assignment}))
        code, out = _solve(tmp_path, cluster, workload, "--current", str(cur))
        err = capsys.readouterr().err
        assert code == 2 and needle in err, err
        assert not out.exists()


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("--weights", "1,-2,3", "non-negative"),
        ("--weights", "1,2", "expected 3 or 4"),
        ("--time-limit", "0", "--time-limit must be positive"),
        ("--method", "exact", None),  # valid: the worked example is tiny
    ],
)
def test_bad_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, needle: str | None
) -> None:
    cluster, workload = _base()
    (tmp_path / "c.json").write_text(json.dumps(cluster))
    (tmp_path / "w.json").write_text(json.dumps(workload))
    out = tmp_path / "o.json"
    args = ["solve", "--cluster", str(tmp_path / "c.json"), "--workload", str(tmp_path / "w.json"),
            "--weights", "1,1,1", "--time-limit", "5", "--quiet", "--out", str(out)]  # fmt: skip
    i = args.index(flag) + 1 if flag in args else None
    if i is None:
        args += [flag, value]
    else:
        args[i] = value
    code = main(args)
    err = capsys.readouterr().err
    if needle is None:
        assert code == 0 and out.exists()
    else:
        assert code == 2 and needle in err and not out.exists(), err


def test_unreadable_and_unknown_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "c.yaml"
    bad.write_text("hosts: [unclosed")
    txt = tmp_path / "c.txt"
    txt.write_text("{}")
    for path, needle in [(bad, "not valid YAML"), (txt, "unknown file type '.txt'"),
                         (tmp_path / "missing.json", "cannot read")]:  # fmt: skip
        code = main(["solve", "--cluster", str(path), "--workload", str(EX / "workload.yaml"),
                     "--weights", "1,1,1", "--quiet"])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 2 and needle in err, err


def test_too_large_for_exact_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    pp = EX.parent / "parapluie"
    code = main(
        [
            "solve",
            "--cluster",
            str(pp / "cluster.yaml"),
            "--workload",
            str(pp / "workload.yaml"),
            "--weights",
            "1,1,1",
            "--method",
            "exact",
            "--quiet",
        ]
    )
    assert code == 2
    assert "above the exact limit" in capsys.readouterr().err


def test_current_placement_on_a_down_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, workload = _base()
    cluster["hosts"][2]["state"] = "down"
    cur = tmp_path / "cur.json"
    cur.write_text(json.dumps({"schema_version": 1, "assignment": {"y2": "h3"}}))
    code, out = _solve(tmp_path, cluster, workload, "--current", str(cur))
    assert code == 2 and "assignment.y2: host 'h3' is down" in capsys.readouterr().err
    assert not out.exists()
