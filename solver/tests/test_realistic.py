"""The realistic snapshot generator: deterministic, valid, and every documented property holds."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest

from clavis.cli import main
from clavis.instance import build_instance
from clavis.realistic import (
    HOST_TYPES,
    PATTERNS,
    RealisticSpec,
    Snapshot,
    generate,
    grid_shape,
    master_worker_edges,
    ring_edges,
    stencil_edges,
)

SPEC = RealisticSpec(hosts=300, seed=3, current=True)


@pytest.fixture(scope="module")
def snap() -> Snapshot:
    return generate(SPEC)


def _containers(s: Snapshot) -> list[dict[str, Any]]:
    return [c for j in s.workload["jobs"] for c in j["containers"]]


def test_same_seed_same_documents() -> None:
    a, b = generate(SPEC), generate(SPEC)
    assert (a.cluster, a.workload, a.current) == (b.cluster, b.workload, b.current)
    other = generate(RealisticSpec(hosts=300, seed=4, current=True))
    assert other.workload != a.workload and other.current != a.current


def test_documents_validate_and_build(snap: Snapshot) -> None:
    cluster, workload, current = snap.models()
    assert current is not None
    # build_instance refuses a current placement that overfills a host or uses a down one.
    inst = build_instance(cluster, workload, current)
    assert len(inst.containers) == len(_containers(snap))
    assert all(h is not None for h in inst.current)
    for hi, h in enumerate(inst.hosts):
        assert sum(c.cores for c, at in zip(inst.containers, inst.current, strict=True)
                   if at == hi) <= h.cores  # fmt: skip


def test_documents_validate_under_the_published_schemas(snap: Snapshot) -> None:
    schemas = Path(__file__).resolve().parents[2] / "docs" / "schema"
    for kind, doc in (("cluster", snap.cluster), ("workload", snap.workload),
                      ("placement", snap.current)):  # fmt: skip
        schema = json.loads((schemas / f"{kind}.schema.json").read_text())
        errors = [str(e) for e in jsonschema_rs.Draft202012Validator(schema).iter_errors(doc)]
        assert not errors, errors[:3]


def test_memories_distinct_and_sizes_mixed(snap: Snapshot) -> None:
    cs = _containers(snap)
    memories = [c["memory_bytes"] for c in cs]
    assert len(set(memories)) == len(memories)
    assert {c["cores"] for c in cs} == {2, 4, 8}
    # Memories vary inside a job too, not only between jobs.
    assert all(len({c["memory_bytes"] for c in j["containers"]}) == len(j["containers"])
               for j in snap.workload["jobs"])  # fmt: skip


def test_host_types_racks_and_states(snap: Snapshot) -> None:
    hosts = snap.cluster["hosts"]
    kinds = {(h["cores"], h["domains"]["count"], h["power"]["idle_w"]) for h in hosts}
    assert len(kinds) >= 3 and kinds <= {(t.cores, t.domains, t.watts[0]) for t in HOST_TYPES}
    assert {h["cores"] for h in hosts} == {16, 32, 64}
    rack_sizes = Counter(h["rack"] for h in hosts)
    assert len(set(rack_sizes.values())) > 1  # racks of uneven size
    jobs = [len(j["containers"]) for j in snap.workload["jobs"]]
    assert any(n > r and n % r for n in jobs for r in rack_sizes.values())
    states = Counter(h.get("state", "up") for h in hosts)
    assert states["drain"] == round(0.02 * 300) and states["down"] == round(0.01 * 300)


def test_drained_keep_residents_down_hold_nothing(snap: Snapshot) -> None:
    assert snap.current is not None
    state = {h["name"]: h.get("state", "up") for h in snap.cluster["hosts"]}
    used = Counter(snap.current["assignment"].values())
    drained = [n for n, s in state.items() if s == "drain"]
    assert drained and all(used[n] > 0 for n in drained)
    assert all(used[n] == 0 for n, s in state.items() if s == "down")
    assert set(snap.current["assignment"]) == {c["name"] for c in _containers(snap)}


def test_current_placement_is_fragmented(snap: Snapshot) -> None:
    """First fit with jobs that came and went leaves empty up hosts between busy ones and
    jobs spread over hosts that are not next to each other."""
    assert snap.current is not None
    order = [h["name"] for h in snap.cluster["hosts"]]
    used = set(snap.current["assignment"].values())
    last = max(order.index(n) for n in used)
    holes = [n for n in order[:last] if n not in used]
    assert len(holes) >= 5
    cores = {h["name"]: h["cores"] for h in snap.cluster["hosts"]}
    size = {c["name"]: c["cores"] for c in _containers(snap)}
    load: Counter[str] = Counter()
    for c, h in snap.current["assignment"].items():
        load[h] += size[c]
    assert sum(load[h] < cores[h] for h in used) >= 0.1 * len(used)
    by_job: dict[str, set[int]] = defaultdict(set)
    for c, h in snap.current["assignment"].items():
        by_job[c.rsplit("-", 1)[0]].add(order.index(h))
    spread = [s for s in by_job.values() if len(s) > 1 and max(s) - min(s) + 1 > len(s)]
    assert len(spread) >= 5


def test_a_small_busy_cluster_still_gets_a_current_placement() -> None:
    """At 32 hosts the snapshot's own jobs can leave no hole for a transient job's
    container: that job stays queued (it never ran) instead of failing the draw."""
    s = generate(RealisticSpec(hosts=32, seed=3, containers=128, current=True))
    assert s.current is not None
    placed = s.current["assignment"]
    assert {c["name"] for c in _containers(s)} == set(placed)
    cores = {h["name"]: h["cores"] for h in s.cluster["hosts"]}
    size = {c["name"]: c["cores"] for c in _containers(s)}
    load: Counter[str] = Counter()
    for c, h in placed.items():
        load[h] += size[c]
    assert all(load[h] <= cores[h] for h in load)


def test_utilisation_and_container_count() -> None:
    s = generate(RealisticSpec(hosts=200, seed=5, utilisation=0.5))
    alive = sum(h["cores"] for h in s.cluster["hosts"] if h.get("state") != "down")
    used = sum(c["cores"] for c in _containers(s))
    biggest = max(sum(c["cores"] for c in j["containers"]) for j in s.workload["jobs"])
    assert 0.5 * alive <= used < 0.5 * alive + biggest
    assert s.current is None
    exact = generate(RealisticSpec(hosts=200, seed=5, containers=800))
    assert len(_containers(exact)) == 800


def test_intensities_straddle_the_threshold(snap: Snapshot) -> None:
    t = snap.workload["devil_threshold_mpki"]
    straddling = [
        j
        for j in snap.workload["jobs"]
        if any(t <= c["intensity_mpki"] <= 1.15 * t for c in j["containers"])
        and any(0.85 * t <= c["intensity_mpki"] < t for c in j["containers"])
    ]
    assert straddling
    mpki = [c["intensity_mpki"] for c in _containers(snap)]
    assert max(mpki) > 3 * t and min(mpki) < 0.3 * t


def test_pattern_helpers() -> None:
    assert ring_edges(2) == [(0, 1), (1, 0)]
    assert set(ring_edges(5)) == {(k, (k + 1) % 5) for k in range(5)} | {
        ((k + 1) % 5, k) for k in range(5)
    }
    assert grid_shape(12) == (3, 4) and grid_shape(7) == (1, 7) and grid_shape(16) == (4, 4)
    # 3 x 4 grid: 3 rows of 3 horizontal links and 4 columns of 2 vertical ones, both ways.
    edges = stencil_edges(12)
    assert len(edges) == 2 * (3 * 3 + 4 * 2)
    assert {b for a, b in edges if a == 5} == {1, 4, 6, 9}
    assert master_worker_edges(4) == [(0, 1), (0, 2), (0, 3), (1, 0), (2, 0), (3, 0)]


def test_each_pattern_present_with_its_edges(snap: Snapshot) -> None:
    seen = Counter(snap.patterns.values())
    assert set(seen) == set(PATTERNS)
    expected = {"ring": ring_edges, "stencil": stencil_edges, "master-worker": master_worker_edges}
    for job in snap.workload["jobs"]:
        pattern = snap.patterns[job["name"]]
        index = {c["name"]: k for k, c in enumerate(job["containers"])}
        edges = sorted((index[f["src"]], index[f["dst"]]) for f in job.get("traffic", []))
        n = len(job["containers"])
        if pattern == "all-to-all":
            assert job["all_to_all_bytes_per_s"] > 0 and not edges
        elif pattern == "none":
            assert not edges and "all_to_all_bytes_per_s" not in job
        else:
            assert edges == expected[pattern](n), job["name"]
            assert all(1e5 < f["bytes_per_s"] < 1.3e9 for f in job["traffic"])


def test_bad_spec_is_refused() -> None:
    for kwargs in ({"hosts": 1}, {"hosts": 10, "utilisation": 0.95}, {"hosts": 10, "down": 0.6}):
        with pytest.raises(ValueError):
            RealisticSpec(**kwargs)


def test_cli_generate_then_solve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["generate", "--hosts", "60", "--seed", "2", "--current", "--out", str(tmp_path)]
    assert main(args) == 0
    assert {p.name for p in tmp_path.iterdir()} == {"cluster.json", "workload.json", "current.json"}
    again = tmp_path / "again"
    again.mkdir()
    assert main([*args[:-1], str(again)]) == 0
    for name in ("cluster.json", "workload.json", "current.json"):
        assert (tmp_path / name).read_bytes() == (again / name).read_bytes()
    out = tmp_path / "placement.json"
    code = main(["solve", "--cluster", str(tmp_path / "cluster.json"),
                 "--workload", str(tmp_path / "workload.json"),
                 "--current", str(tmp_path / "current.json"), "--weights", "1,1,1,1",
                 "--method", "noderr", "--quiet", "--out", str(out)])  # fmt: skip
    assert code == 0
    assert json.loads(out.read_text())["solution"]["method"] == "noderr"
    capsys.readouterr()
    assert main(["generate", "--hosts", "60", "--out", str(tmp_path / "nowhere")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert main(["generate", "--hosts", "60", "--utilisation", "2", "--out", str(tmp_path)]) == 2
    assert "utilisation" in capsys.readouterr().err
