"""select_clavis.so's choice of candidate nodes on its own (build/clavis_narrow_test,
the same clavis_narrow.c the plugin links): which nodes a devil job and a multi-node
job are offered first, on hand-checkable tables, and a multi-node job test at 20,000
nodes with one rack per node in linear time (the rack search was quadratic: about
0.6 s of CPU per job test, inside slurmctld)."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from .minicluster import BUILD, REPO

DRIVER = BUILD / "clavis_narrow_test"
NOW = 1_795_000_000.0


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    cp = subprocess.run(
        ["make", "-C", str(REPO / "slurm-plugin"), "build/clavis_narrow_test"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stdout + cp.stderr


def advice(nodes: list[tuple[str, str, str, str, str]]) -> str:
    """An advice file of (node, host, rack, contention, node_class) rows."""
    keys = ("node", "host", "rack", "contention", "node_class")
    return json.dumps({
        "schema_version": 2, "kind": "clavis.advice", "valid_s": 180,
        "generated": datetime.fromtimestamp(NOW, UTC).isoformat(),
        "nodes": [dict(zip(keys, row, strict=True)) for row in nodes],
    })  # fmt: skip


def narrow(tmp_path: Path, adv: str, table: list[str], *args: int) -> str:
    (tmp_path / "advice.json").write_text(adv)
    (tmp_path / "nodes").write_text("\n".join(table) + "\n")
    cp = subprocess.run(
        [str(DRIVER), "narrow", str(tmp_path / "advice.json"), str(NOW),
         str(tmp_path / "nodes"), *map(str, args)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    return cp.stdout.strip()


# racks ra (3 nodes on 2 hosts) and rb (2 nodes): h1 runs a devil, h3 is unknown
SMALL = advice([
    ("a1", "h1", "ra", "ok", "devil"),
    ("a2", "h1", "ra", "ok", "turtle"),
    ("a3", "h2", "ra", "devil-free", "turtle"),
    ("b1", "h3", "rb", "unknown", "unknown"),
    ("b2", "h4", "rb", "devil-free", "unknown"),
])  # fmt: skip
TABLE = ["a1", "a2", "a3", "b1", "b2", "x1"]  # x1: a node the advice does not know


@pytest.mark.parametrize(
    ("table", "args", "want"),
    [
        # a devil job: off every node of a devil's host; strict also off unknown ones
        (TABLE, (1, 1, 0), "narrowed 4: a3 b1 b2 x1"),
        (TABLE, (1, 1, 1), "narrowed 2: a3 b2"),
        # a 2-node job keeps the rack with the most candidates, then (devil) within it
        (TABLE, (2, 0, 0), "narrowed 3: a1 a2 a3"),
        (TABLE, (2, 1, 0), "narrowed 2: b1 b2"),
        (TABLE, (3, 1, 0), "narrowed 4: a3 b1 b2 x1"),  # no rack holds 3: any rack
        (TABLE, (3, 0, 0), "narrowed 3: a1 a2 a3"),
        (TABLE, (4, 0, 0), "nothing: not narrower"),
        # a tie goes to the rack that reached the count first in node order
        (["b1", "b2", "a1", "!a2", "a3", "x1"], (2, 0, 0), "narrowed 2: b1 b2"),
        (["a1", "b1", "a3", "b2"], (2, 0, 0), "narrowed 2: a1 a3"),
        # nothing to narrow: an unhinted single-node job, or the set is already so
        (TABLE, (1, 0, 0), "nothing: not narrower"),
        (["a3", "b2"], (1, 1, 1), "nothing: not narrower"),
        (["a1", "a2"], (1, 1, 0), "nothing: not narrower"),  # nothing left
        ([], (2, 1, 1), "nothing: not narrower"),
    ],
)
def test_narrowed_sets(tmp_path: Path, table: list[str], args: tuple[int, ...], want: str) -> None:
    assert narrow(tmp_path, SMALL, table, *args) == want


def test_empty_advice_narrows_nothing(tmp_path: Path) -> None:
    assert narrow(tmp_path, advice([]), TABLE, 2, 1, 1) == "nothing: not narrower"
    assert narrow(tmp_path, advice([]), TABLE, 1, 1, 0) == "nothing: not narrower"


def test_one_rack_per_node_at_20000_nodes(tmp_path: Path) -> None:
    """A 2-node devil job at 20,000 nodes, each its own rack: both narrowed sets in a
    few milliseconds of CPU (a generous bound: bench/plugin measures it)."""
    n = 20_000
    rows = [(f"n{i:05d}", f"h{i:05d}", f"r{i:05d}", "ok" if i % 3 == 0 else "devil-free",
             "unknown") for i in range(n)]  # fmt: skip
    (tmp_path / "advice.json").write_text(advice(rows))
    (tmp_path / "nodes").write_text("".join(f"n{i:05d}\n" for i in range(n)))
    cp = subprocess.run(
        [str(DRIVER), "time", str(tmp_path / "advice.json"), str(NOW),
         str(tmp_path / "nodes"), "2", "1", "21"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    words = cp.stdout.split()
    got = dict(zip(words[0::2], words[1::2], strict=True))
    # one node per rack: no rack can hold the job, so only the devil hosts go
    assert got["kept"] == str(n - (n + 2) // 3)
    assert float(got["cpu_median_us"]) < 50_000, got


def test_job_tests_never_read_a_changed_file(tmp_path: Path) -> None:
    """The file at 20,000 nodes changes 4 times while job tests go on: the watcher thread
    reads and parses it each time, and every job test, the first after each change
    included, costs what an unchanged file costs (under 10 ms of CPU, issue 15's target;
    a job test that read and parsed the file took about 40 ms here, bench/plugin)."""
    n = 20_000
    kinds = (("ok", "devil"), ("devil-free", "turtle"))  # hosts in turn
    rows = [(f"n{i:05d}", f"h{i // 2:05d}", "r1", *kinds[i // 2 % 2]) for i in range(n)]
    (tmp_path / "advice.json").write_text(advice(rows))
    (tmp_path / "nodes").write_text("".join(f"n{i:05d}\n" for i in range(n)))
    cp = subprocess.run(
        [str(DRIVER), "time", str(tmp_path / "advice.json"), str(NOW),
         str(tmp_path / "nodes"), "2", "1", "11", "4"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    words = cp.stdout.split()
    got = {k: float(v) for k, v in zip(words[0::2], words[1::2], strict=True)}
    assert got["changes"] == 4 and got["tests"] >= 4 * 12, got
    assert got["kept"] == n // 2, got  # the advice was held: the devil-free hosts
    assert got["cpu_first_us"] < 10_000 and got["cpu_max_us"] < 10_000, got
