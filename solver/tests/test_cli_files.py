"""Input files the parser cannot read, and rules the schemas can only state: every such
file ends in exit 2 with a message naming it, and the published schema says the rule."""

from __future__ import annotations

import codecs
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from clavis.cli import main

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples" / "worked"
SCHEMA = ROOT / "docs" / "schema"

# Each file the CLI reads, as (role, document): the worked example's documents.
ROLES = ("cluster", "workload", "current", "placement", "weights")


def _docs() -> dict[str, Any]:
    return {
        "cluster": yaml.safe_load((EX / "cluster.yaml").read_text()),
        "workload": yaml.safe_load((EX / "workload.yaml").read_text()),
        "current": yaml.safe_load((EX / "current.yaml").read_text()),
        "placement": yaml.safe_load((EX / "placement.yaml").read_text()),
        "weights": {"P": 1, "D": 1, "C": 1, "M": 1},
    }


def _run(tmp: Path, bad_role: str, raw: bytes, suffix: str = ".json") -> tuple[int, Path]:
    """`clavis evaluate` (which reads all five kinds of file) with one file replaced."""
    paths = {}
    for role, doc in _docs().items():
        path = tmp / f"{role}.json"
        path.write_text(json.dumps(doc))
        paths[role] = path
    bad = tmp / f"bad-{bad_role}{suffix}"
    bad.write_bytes(raw)
    paths[bad_role] = bad
    code = main(["evaluate", "--cluster", str(paths["cluster"]),
                 "--workload", str(paths["workload"]), "--current", str(paths["current"]),
                 "--placement", str(paths["placement"]),
                 "--weights-file", str(paths["weights"])])  # fmt: skip
    return code, bad


def _text(role: str) -> str:
    return json.dumps(_docs()[role])


ENCODINGS: list[tuple[str, Any, str]] = [
    ("latin-1", lambda t: t.replace("}", ', "x": "\xe9"}', 1).encode("latin-1"), "not UTF-8"),
    ("utf-16-bom", lambda t: t.encode("utf-16"), "UTF-16 text (byte-order mark)"),
    ("utf-16-be-bom", lambda t: codecs.BOM_UTF16_BE + t.encode("utf-16-be"), "UTF-16 text"),
    ("utf-16-le", lambda t: t.encode("utf-16-le"), "NUL bytes"),
    ("utf-32-bom", lambda t: t.encode("utf-32"), "UTF-32 text (byte-order mark)"),
    ("deep", lambda t: b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
    ("long-int", lambda t: b'{"P": ' + b"9" * 5000 + b"}", "not valid JSON"),
    ("not-a-mapping", lambda t: b"[1, 2, 3]", "expected a mapping"),
]


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("kind", "encode", "needle"), ENCODINGS, ids=[e[0] for e in ENCODINGS])
def test_unreadable_file_exits_2_naming_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    *,
    role: str,
    kind: str,
    encode: Any,
    needle: str,
) -> None:
    code, bad = _run(tmp_path, role, encode(_text(role)))
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"clavis: error: {bad}: " in err and needle in err, err
    assert "Traceback" not in err


def test_latin1_error_says_where(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = b'{\n  "schema_version": 1,\n  "name": "caf\xe9"\n}'
    code, bad = _run(tmp_path, "cluster", raw)
    assert code == 2
    assert f"{bad}: not UTF-8: byte 0xe9 at line 3, column 15" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_utf8_byte_order_mark_is_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    """RFC 8259 lets a parser ignore a UTF-8 mark; editors on some systems write one."""
    doc = _docs()["cluster"]
    text = json.dumps(doc) if suffix == ".json" else yaml.safe_dump(doc)
    code, _ = _run(tmp_path, "cluster", codecs.BOM_UTF8 + text.encode(), suffix)
    assert code == 0, capsys.readouterr().err
    assert "F = " in capsys.readouterr().out


def test_deep_yaml_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, bad = _run(tmp_path, "workload", b"jobs: " + b"[" * 50_000, ".yaml")
    err = capsys.readouterr().err
    assert code == 2 and f"{bad}: not valid YAML" in err, err


# Rules no JSON Schema keyword can express (they compare two values, or items of a list
# by a key): the model refuses them, and the published schema states them in a
# description. (mutation, value, error needle, schema file, JSON pointer, phrase)
RULES: list[tuple[str, Any, str, str, str, str]] = [
    ("cluster/links/cross_rack", 0.5, "cross_rack (0.5) must not be cheaper than same_rack",
     "cluster", "$defs/LinkCosts/properties/cross_rack", "Must not be below same_rack"),
    ("cluster/hosts/0/power/peak_w", 50, "peak_w (50.0) is below idle_w (100.0)",
     "cluster", "$defs/PowerModel/properties/peak_w", "Must not be below idle_w"),
    ("cluster/hosts/0/power/off_w", 150, "off_w (150.0) is above idle_w (100.0)",
     "cluster", "$defs/PowerModel/properties/off_w", "Must not be above idle_w"),
    ("cluster/hosts/0/cores", 6, "domains.count * domains.cores_per_domain = 8 but cores = 6",
     "cluster", "$defs/Host/properties/cores", "domains.count * domains.cores_per_domain"),
    ("cluster/hosts/1/name", "h1", "duplicate host name 'h1'",
     "cluster", "properties/hosts", "Host names must be unique"),
    ("workload/jobs/1/traffic/0/dst", "y1", "jobs[1](Y).traffic[0]: flow goes from 'y1' to itself",
     "workload", "$defs/Flow/properties/dst", "other than src"),
    ("workload/jobs/1/traffic", [{"src": "y1", "dst": "y2", "bytes_per_s": 1.0},
                                 {"src": "y1", "dst": "y2", "bytes_per_s": 2.0}],
     "traffic[1] repeats the flow 'y1' -> 'y2'",
     "workload", "$defs/Job/properties/traffic", "At most one flow per (src, dst) pair"),
    ("workload/jobs/1/traffic/0/src", "x1", "traffic[0].src = 'x1' is not a container of job 'Y'",
     "workload", "$defs/Flow/properties/src", "A container of this job"),
    ("workload/jobs/2/containers/0/name", "x1", "duplicate container name 'x1'",
     "workload", "properties/jobs", "container names unique across all jobs"),
    ("workload/jobs/0/containers/0/cores", 64, "is larger than every host",
     "workload", "$defs/Container/properties/cores", "largest host"),
    ("current/assignment/y2", "h9", "unknown host 'h9'",
     "placement", "properties/assignment", "every value a host of the cluster"),
]  # fmt: skip


def _pointer(doc: Any, pointer: str) -> Any:
    for part in pointer.split("/"):
        doc = doc[part]
    return doc


@pytest.mark.parametrize(
    ("path", "value", "needle", "schema", "pointer", "phrase"), RULES, ids=[r[0] for r in RULES]
)
def test_rule_is_enforced_and_stated(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    *,
    path: str,
    value: Any,
    needle: str,
    schema: str,
    pointer: str,
    phrase: str,
) -> None:
    docs = _docs()
    role, *parents, leaf = path.split("/")
    node = docs[role]
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    node[leaf] = value
    code, bad = _run(tmp_path, role, json.dumps(docs[role]).encode())
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"clavis: error: {bad}: " in err and needle in err, err
    published = json.loads((SCHEMA / f"{schema}.schema.json").read_text())
    assert phrase in _pointer(published, pointer)["description"]


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ('[server]\nname = "caf\xe9"\n'.encode("latin-1"), "not UTF-8: byte 0xe9 at line 2"),
        ("[server]\n".encode("utf-16"), "UTF-16 text"),
    ],
)
def test_clavisd_config_not_utf8_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], raw: bytes, needle: str
) -> None:
    """`clavis repack` reads clavisd's config first: the same rule, the same message."""
    cfg = tmp_path / "clavis.toml"
    cfg.write_bytes(raw)
    code = main(["repack", "--config", str(cfg)])
    err = capsys.readouterr().err
    assert code == 2 and f"clavis: error: {cfg}: {needle}" in err, err
