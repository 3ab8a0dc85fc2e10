"""Issue 13's acceptance scenario on the testbed, as `make demo` runs and narrates it
(deploy/testbed/ctb/demo.py): plain sbatch jobs only, two streaming, two compute-bound,
one 2-node MPICH job, on a fresh `clavis-testbed up --stack`.

Checked here: every host reports with watts; every job is linked to its containers in
clavisd's /containers; the streaming jobs are classed devil and the others turtle by
clavisd's hysteresis (not a hint: none is given); the advice is fresh, readable by the
slurm user, names the streaming application a devil, and slurmctld's log shows
select/clavis loading it; `clavis repack --dry-run` prints P, D, C and M before and after
and its solver placement separates the devils (D 0) and gathers the MPI ranks (C falls);
`--apply` stores nothing and exits 1; a new streaming job of the same application,
unhinted, lands off the devil hosts although cons_tres would have taken a node on one,
and slurmctld's log says select/clavis remembered the application as a devil. The whole
scenario is bounded (every wait in demo.py is) and must take under SCENARIO_S.

Runs after test_stack (conftest.py), because it takes down whatever testbed is up to
start a fresh one, and takes its own down at the end.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from . import tb

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy" / "testbed"))

from ctb import demo

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not tb.is_root(), reason="the testbed needs root"),
]

SCENARIO_S = 240.0
OBJECTIVES = re.compile(r"([PDCM]) (\S+) -> (\S+) ")


@pytest.fixture(scope="module")
def outcome() -> Any:
    lines: list[str] = []
    t0 = time.monotonic()
    try:
        out = demo.scenario(say=lines.append)
        seconds = time.monotonic() - t0
        # the demo cancels its jobs: the queue empties (bounded)
        deadline = time.monotonic() + 30
        queue = tb.slurm(["squeue", "-h", "-o", "%i %T"])
        while queue.strip() and time.monotonic() < deadline:
            time.sleep(0.5)
            queue = tb.slurm(["squeue", "-h", "-o", "%i %T"])
        yield {"out": out, "text": "\n".join(lines), "seconds": seconds, "queue": queue}
    finally:
        tb.tb("down", check=False)


def test_scenario_is_bounded_and_leaves_no_demo_job(outcome: dict[str, Any]) -> None:
    assert outcome["seconds"] < SCENARIO_S, outcome["text"]
    assert outcome["queue"].strip() == "", outcome["queue"]
    assert "clavis-testbed down" in outcome["text"].splitlines()[-1]


def test_every_host_reports_with_watts(outcome: dict[str, Any]) -> None:
    out = outcome["out"]
    st = tb.status()
    assert set(out.hosts) == {h["name"] for h in st["hosts"]}
    assert all(h["watts"] > 0 and h["last_report"] for h in out.hosts.values()), out.hosts


def test_jobs_linked_and_classed_by_measurement(outcome: dict[str, Any]) -> None:
    out = outcome["out"]
    # the first five jobs (stream-b ended in the last step, stream-c replaced it)
    first = [j for j in out.jobs if j.tag != "stream-c"]
    assert sorted(j.tag for j in first) == ["crunch-a", "crunch-b", "mpi", "stream-a"]
    mpi = next(j for j in first if j.tag == "mpi")
    assert len(mpi.nodes) == 2
    for j in first:
        for node in j.nodes:
            c = out.containers[node]
            assert c["job"] == j.id, (node, c)
            assert c["app"] == f"0:{j.name}", (node, c)
            assert c["class_hint"] is None
            want = "devil" if j.name == "stream-triad" else "turtle"
            assert c["klass"] == want and c["class_source"] == "samples", (node, c)
            # the hysteresis decided it: at least 7 of the last 10 votes agree
            assert c["votes"][-10:].count(want[0]) >= 7, (node, c)


def test_advice_fresh_readable_by_slurm_and_used_by_select_clavis(
    outcome: dict[str, Any],
) -> None:
    out = outcome["out"]
    assert out.advice_age_s is not None and 0 <= out.advice_age_s < out.advice["valid_s"]
    apps = {a["app"]: a["app_class"] for a in out.advice["apps"]}
    assert apps.get("0:stream-triad") == "devil", apps
    devils = {name for name, c in out.containers.items() if c["klass"] == "devil"}
    stream_hosts = {n["host"] for n in out.advice["nodes"] if n["node"] in devils}
    assert stream_hosts
    for n in out.advice["nodes"]:
        if n["host"] in stream_hosts:
            assert n["contention"] != "devil-free", n
    assert any(re.search(r"select/clavis: advice \S+: \d+ nodes", ln)
               for ln in out.ctld_advice_lines), out.ctld_advice_lines  # fmt: skip


def _objectives(stdout: str) -> tuple[dict[str, tuple[float, float]], dict[str, float]]:
    m = re.search(r"^objectives (.*)$", stdout, re.M)
    assert m, stdout
    values = {k: (float(a), float(b)) for k, a, b in OBJECTIVES.findall(m.group(1))}
    s = re.search(r"^\(the solver's placement, with the deferred moves: (.*)\)$", stdout, re.M)
    solver = {k: float(v) for k, v in re.findall(r"([PDCM]) ([^,\s]+)", s.group(1))} if s else {}
    return values, solver


def test_repack_dry_run_prints_objectives_and_separates_devils(outcome: dict[str, Any]) -> None:
    dry = outcome["out"].repack_dry
    assert dry["rc"] == 0, dry
    assert dry["decision"] in {"planned", "deferred"}, dry
    values, solver = _objectives(dry["stdout"])
    assert set(values) == {"P", "D", "C", "M"}, values
    # where the solver would put them: the two devils of one host apart, the MPI job's
    # ranks on one host (its cross-host traffic gone)
    target = solver or {k: v[1] for k, v in values.items()}
    assert values["D"][0] > 0 and target["D"] < values["D"][0], (values, solver)
    assert values["C"][0] > 0 and target["C"] < values["C"][0], (values, solver)


def test_repack_apply_stores_nothing_without_a_migrator(outcome: dict[str, Any]) -> None:
    applied = outcome["out"].repack_apply
    assert applied["rc"] == 1, applied
    if applied["decision"] == "planned":
        assert "no migrator agent answered" in applied["stderr"], applied
    else:
        # every host is full (each node is a container of a fixed size), so the moves
        # form cycles no wave can order without a free host: nothing is stored
        assert applied["decision"] == "deferred", applied
        assert "nothing stored, nothing moved" in applied["stdout"], applied


def test_new_streaming_job_avoids_the_devil_hosts_unhinted(outcome: dict[str, Any]) -> None:
    out = outcome["out"]
    job = out.new_job
    assert job is not None and len(job.nodes) == 1
    assert out.devil_hosts
    # the test means something only if cons_tres would have put it on a devil host
    assert out.cons_tres_node is not None
    assert out.cons_tres_node.rsplit("c", 1)[0] in out.devil_hosts, out
    assert job.nodes[0].rsplit("c", 1)[0] not in out.devil_hosts, out
    text = "\n".join(out.ctld_job_lines)
    assert "application 0:stream-triad remembered as devil" in text, text
    assert "placed on advised nodes" in text, text
