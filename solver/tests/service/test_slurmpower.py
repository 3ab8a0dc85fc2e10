"""Slurm power saving (slurmpower.py): where a resumed node goes, chosen by the evaluator
on a snapshot, and the service running the site's node command (a fake one here: the
testbed's real one runs in tests/integration/test_power.py)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from clavis.model import Cluster, Container, Job, Placement, Workload
from clavis.objectives import Weights
from clavis.service.slurmpower import NodeAsk, ResumeError, SlurmPower, choose_hosts
from clavis.service.slurmpower_api import ResumeIn
from clavis.service.slurmpower_config import SlurmPowerConfig
from clavis.service.snapshot import Snapshot

from .helpers import cluster_doc

W = Weights(0.4, 0.2, 0.3, 0.1)


def _snap(running: dict[str, tuple[str, int]], states: dict[str, str] | None = None) -> Snapshot:
    """h1..h4 (8 cores; h1, h3 in rack r1, h2, h4 in r0); ``running``: node -> (host,
    cores), one job; ``states``: hosts not up (drain: off, unknown or quiet)."""
    doc = cluster_doc(4, 8)
    for h in doc["hosts"]:
        h["state"] = (states or {}).get(h["name"], "up")
    cluster = Cluster.model_validate(doc)
    members = [Container(name=n, cores=c, memory_bytes=2**30, intensity_mpki=0.5)
               for n, (_, c) in running.items()]  # fmt: skip
    workload = Workload(devil_threshold_mpki=10.0,
                        jobs=[Job(name="j", containers=members)]) if members else None  # fmt: skip
    where = Placement(assignment={n: h for n, (h, _) in running.items()})
    return Snapshot(cluster, workload, where)


def _ask(*names: str, cores: int = 2) -> list[NodeAsk]:
    return [NodeAsk(n, cores, 2**30) for n in names]


def test_a_host_that_is_on_with_room_wins_over_powering_one_on() -> None:
    snap = _snap({"x": ("h1", 4)}, {"h2": "drain", "h3": "drain", "h4": "drain"})
    got = choose_hosts(snap, _ask("a"), W, powerable=frozenset({"h2", "h3", "h4"}),
                       pending={}, pair_bytes_per_s=1e6)  # fmt: skip
    assert got == {"a": "h1"}


def test_nodes_resumed_together_share_one_host_when_one_has_room() -> None:
    # h1 has room for one of them, h3 (empty, on) for both: split, they would talk
    # across hosts; together C is zero for the same watts
    snap = _snap({"x": ("h1", 6)}, {"h2": "drain", "h4": "drain"})
    got = choose_hosts(snap, _ask("a", "b", cores=2), W, powerable=frozenset(),
                       pending={}, pair_bytes_per_s=1e6)  # fmt: skip
    assert got == {"a": "h3", "b": "h3"}


def test_an_off_host_is_chosen_only_when_no_host_that_is_on_has_room() -> None:
    snap = _snap({"x": ("h1", 8), "y": ("h3", 8)}, {"h2": "drain", "h4": "drain"})
    got = choose_hosts(snap, _ask("a"), W, powerable=frozenset({"h4"}), pending={},
                       pair_bytes_per_s=1e6)  # fmt: skip
    assert got == {"a": "h4"}  # h2 is drain but not powerable (unknown, or quiet)


def test_a_node_too_large_for_every_candidate_is_refused() -> None:
    snap = _snap({"x": ("h1", 6)}, {"h2": "drain", "h3": "drain", "h4": "drain"})
    with pytest.raises(ResumeError, match="no host"):
        choose_hosts(snap, _ask("a", cores=4), W, powerable=frozenset(), pending={},
                     pair_bytes_per_s=1e6)  # fmt: skip


def test_pending_starts_hold_their_cores_and_a_running_node_stays() -> None:
    snap = _snap({"x": ("h1", 4)}, {"h2": "drain", "h4": "drain"})
    got = choose_hosts(snap, [*_ask("a", cores=4), *_ask("x", cores=4)], W,
                       powerable=frozenset(), pending={"p": ("h1", 4)},
                       pair_bytes_per_s=1e6)  # fmt: skip
    assert got == {"x": "h1", "a": "h3"}


def test_a_job_too_large_for_one_host_is_split_over_a_rack() -> None:
    snap = _snap({}, {"h2": "drain", "h4": "drain"})
    got = choose_hosts(snap, _ask("a", "b", "c", cores=4), W, powerable=frozenset(),
                       pending={}, pair_bytes_per_s=1e6)  # fmt: skip
    assert sorted(got.values()) == ["h1", "h1", "h3"]  # h1 and h3: both of rack r1


def _fake_command(tmp_path: Path) -> list[str]:
    """A node command that records its arguments and fails for node 'bad'."""
    log = tmp_path / "calls"
    exe = tmp_path / "node-command"
    exe.write_text(f'#!/bin/sh\necho "$@" >> {log}\n[ "$2" != bad ]\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return [str(exe)]


def test_resume_and_suspend_run_the_node_command(tmp_path: Path) -> None:
    snap = _snap({"x": ("h1", 4)}, {"h2": "drain", "h3": "drain", "h4": "drain"})
    cfg = SlurmPowerConfig(enabled=True, node_command=_fake_command(tmp_path))
    sp = SlurmPower(cfg, snapshot=lambda _now: snap, weights=lambda: W, host_power=None)
    out = sp.resume(_ask("a", "bad"))
    assert [(r.node, r.host, r.ok) for r in out] == [("a", "h1", True), ("bad", "h1", False)]
    # a's start holds its cores: 4 running + 2 pending leave 2, so c (4) fits nowhere
    refused = sp.resume(_ask("c", cores=4))
    assert not refused[0].ok and "no host" in refused[0].message
    assert [r.ok for r in sp.suspend(["a", "bad"])] == [True, False]
    calls = (tmp_path / "calls").read_text().splitlines()
    assert sorted(calls[:2]) == ["start a h1", "start bad h1"]
    assert sorted(calls[2:]) == ["stop a", "stop bad"]


def _program() -> Any:
    """slurm-plugin/power/clavis_slurm_power.py, loaded as slurmctld's programs load it."""
    path = Path(__file__).resolve().parents[3] / "slurm-plugin" / "power" / "clavis_slurm_power.py"
    spec = importlib.util.spec_from_file_location("clavis_slurm_power", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _expand(hostlist: str) -> list[str]:
    """A stand-in for `scontrol show hostnames` on the lists below (n[1-3] and n4 forms)."""
    out = []
    for part in hostlist.split(","):
        if "[" in part:
            head, rng = part.rstrip("]").split("[")
            lo, hi = rng.split("-")
            out += [f"{head}{i}" for i in range(int(lo), int(hi) + 1)]
        else:
            out.append(part)
    return out


def _no_job_lookup(job_id: int) -> str:
    raise AssertionError(f"job {job_id}: the file gives nodes_alloc, no scontrol needed")


def test_the_resume_program_asks_once_per_job_of_slurms_resume_file(tmp_path: Path) -> None:
    prog = _program()
    names = ["n1", "n2", "n3", "n4", "n5"]
    f = tmp_path / "resume.json"
    # Slurm 23.02 on: nodes_resume and nodes_alloc (the job's nodes, resumed or up)
    f.write_text(json.dumps({"all_nodes_resume": "n[1-5]", "jobs": [
        {"job_id": 7, "nodes_alloc": "n[1-3],n8", "nodes_resume": "n[1-3]"},
        {"job_id": 8, "nodes_alloc": "n[3-4],n9", "nodes_resume": "n3,n4"}]}))  # fmt: skip
    groups, problems = prog.resume_groups(names, str(f), _expand, _no_job_lookup)
    # n3 belongs to the first job that names it; n5 to no job: a group of its own; each
    # job's nodes that are up are its allocated ones this run does not resume
    assert [tuple(g) for g in groups] == [
        (["n1", "n2", "n3"], ["n8"]), (["n4"], ["n9"]), (["n5"], [])]  # fmt: skip
    assert problems == []
    # no file, or garbage: one group, as before Slurm wrote the file
    assert prog.resume_groups(names, "", _expand, _no_job_lookup) == ([(names, [])], [])
    f.write_text("{not json")
    assert prog.resume_groups(names, str(f), _expand, _no_job_lookup) == ([(names, [])], [])
    f.write_text(json.dumps({"jobs": [{"job_id": 1, "nodes": 5}, "x"]}))
    assert prog.resume_groups(names, str(f), _expand, _no_job_lookup) == ([(names, [])], [])


def test_with_slurm_22_05s_resume_file_the_job_nodes_come_from_scontrol(tmp_path: Path) -> None:
    prog = _program()
    f = tmp_path / "resume.json"
    f.write_text(json.dumps({"all_nodes": "n[1-2]", "jobs": [{"job_id": 7, "nodes": "n[1-2]"}]}))
    asked: list[int] = []

    def lookup(job_id: int) -> str:
        asked.append(job_id)
        return "n[1-2],n6"

    assert prog.resume_groups(["n1", "n2"], str(f), _expand, lookup) == (
        [(["n1", "n2"], ["n6"])],
        [],
    )
    assert asked == [7]
    # and the NodeList parser reads scontrol's one-line record (ReqNodeList is not it)
    line = "JobId=7 JobName=x ReqNodeList=(null) ExcNodeList=(null) NodeList=n[1-2],n6 BatchHost=n6"
    exe = tmp_path / "scontrol"
    exe.write_text(f"#!/bin/sh\necho '{line}'\n")
    exe.chmod(0o755)
    assert prog.job_nodelist(str(exe), 7) == "n[1-2],n6"


_RESUMED = {"job_id": 7, "nodes_resume": "n1"}


@pytest.mark.parametrize(
    ("job", "says"),
    [
        ({**_RESUMED, "nodes_alloc": 5}, "nodes_alloc 5 is not a host list"),
        ({**_RESUMED, "nodes_alloc": ""}, 'nodes_alloc "" is not a host list'),
        ({**_RESUMED, "nodes_alloc": "n[1-"}, "nodes_alloc 'n[1-' is not a host list: bad"),
        ({**_RESUMED, "nodes_alloc": "n1,x y"}, "names 'x y', not a node name"),
        ({"job_id": "7; rm", "nodes": "n1"}, "job_id '7; rm' is not a job id"),
        ({"job_id": True, "nodes": "n1"}, "job_id 'True' is not a job id"),
    ],
)
def test_garbage_in_the_job_nodes_is_refused_by_name_and_the_nodes_still_resume(
    tmp_path: Path, job: dict[str, Any], says: str
) -> None:
    prog = _program()

    def expand(hostlist: str) -> list[str]:
        if hostlist.count("[") != hostlist.count("]"):
            raise prog.PowerError(f"bad host list {hostlist!r}")
        return _expand(hostlist)

    f = tmp_path / "resume.json"
    f.write_text(json.dumps({"jobs": [job]}))
    groups, problems = prog.resume_groups(["n1"], str(f), expand, _no_job_lookup)
    assert groups == [(["n1"], [])]
    assert len(problems) == 1 and "SLURM_RESUME_FILE job" in problems[0], problems
    assert says in problems[0], problems


def test_the_resume_request_is_checked_as_clavisd_checks_it() -> None:
    prog = _program()
    sizes = [{"name": "n1", "cores": 2, "memory_bytes": 2**30}]
    # without job nodes: version 1, which every clavisd reads; with them: version 2
    assert prog.resume_request(sizes, []) == {"nodes": sizes}
    doc = prog.resume_request(sizes, ["n6"])
    assert doc == {"schema_version": 2, "nodes": sizes, "job_nodes": ["n6"]}
    assert ResumeIn.model_validate(doc).job_nodes == ["n6"]  # clavisd's end agrees
    for job_nodes, says in ((["n1"], "job_nodes n1 are being resumed"),
                            (["n6", "n6"], "job_nodes lists a node more than once"),
                            (["n 6"], "job_nodes has 'n 6', not a node name"),
                            (["n"] * 4097, "4097 job_nodes")):  # fmt: skip
        with pytest.raises(prog.PowerError, match=re.escape(says)):
            prog.resume_request(sizes, job_nodes)
    with pytest.raises(prog.PowerError, match="node n1: cores 0"):
        prog.resume_request([{**sizes[0], "cores": 0}], [])


def test_the_programs_refuse_a_key_file_others_can_read(tmp_path: Path) -> None:
    prog = _program()
    key = tmp_path / "key.toml"
    key.write_text('[[keys]]\nid = "k1"\nrole = "admin"\nsecret = "0123456789abcdef0123"\n')
    key.chmod(0o640)
    with pytest.raises(prog.PowerError, match="mode 640"):
        prog.load_key(key)
    key.chmod(0o600)
    assert prog.load_key(key) == ("k1", b"0123456789abcdef0123")


# --- the job's running nodes (SLURM_RESUME_FILE's nodes_alloc less nodes_resume) ------


def test_a_resumed_node_goes_to_the_rack_of_its_jobs_running_node() -> None:
    # x (the job's node that is up) fills h2 in rack r0; h1 (r1) and h4 (r0) each have 4
    # cores free and the same load, so alone the node ties and goes to h1 by name
    snap = _snap({"x": ("h2", 8), "y": ("h1", 4), "z": ("h4", 4)}, {"h3": "drain"})
    opts: dict[str, Any] = {"powerable": frozenset(), "pending": {}, "pair_bytes_per_s": 1e6}
    assert choose_hosts(snap, _ask("a"), W, **opts) == {"a": "h1"}
    assert choose_hosts(snap, _ask("a"), W, job_nodes=["x"], **opts) == {"a": "h4"}
    # a name clavisd has not seen reported changes nothing
    assert choose_hosts(snap, _ask("a"), W, job_nodes=["ghost"], **opts) == {"a": "h1"}


def test_a_resumed_node_joins_its_jobs_running_node_on_its_host_when_there_is_room() -> None:
    snap = _snap({"x": ("h2", 4), "y": ("h1", 2), "z": ("h4", 2)}, {"h3": "drain"})
    opts: dict[str, Any] = {"powerable": frozenset(), "pending": {}, "pair_bytes_per_s": 1e6}
    assert choose_hosts(snap, _ask("a"), W, **opts) == {"a": "h1"}
    assert choose_hosts(snap, _ask("a"), W, job_nodes=["x"], **opts) == {"a": "h2"}
    # two resumed nodes (6 cores) that do not fit beside x go to its rack (h4), not to h1
    assert choose_hosts(snap, _ask("a", "b", cores=3), W, **opts) == {"a": "h1", "b": "h1"}
    got = choose_hosts(snap, _ask("a", "b", cores=3), W, job_nodes=["x"], **opts)
    assert got == {"a": "h4", "b": "h4"}


def test_the_programs_sample_config_loads() -> None:
    prog = _program()
    sample = Path(__file__).resolve().parents[3] / "deploy" / "config" / "slurm-power.toml.sample"
    cfg = prog.load_config(sample)
    assert cfg["url"].startswith("https://") and cfg["key_file"].endswith(".toml")


def test_resumed_nodes_of_a_job_whose_running_node_is_a_devil_are_placed_as_devils() -> None:
    # rack r0: h2 (x, the job's running node, full), h4 (a devil z of another job), h6 (a
    # turtle t); r1 is drained. The new node goes to r0 either way; as a turtle it ties
    # and goes to h4 by name, as a devil (the class of x) D keeps it off h4
    doc = cluster_doc(6, 8)
    for h in doc["hosts"]:
        h["state"] = "up" if h["rack"] == "r0" else "drain"
    cluster = Cluster.model_validate(doc)

    def job(name: str, mpki: float, cores: int) -> Job:
        c = Container(name=name, cores=cores, memory_bytes=2**30, intensity_mpki=mpki)
        return Job(name=f"j-{name}", containers=[c])

    def snap(x_mpki: float) -> Snapshot:
        jobs = [job("x", x_mpki, 8), job("z", 20.0, 2), job("t", 0.5, 2)]
        where = Placement(assignment={"x": "h2", "z": "h4", "t": "h6"})
        return Snapshot(cluster, Workload(devil_threshold_mpki=10.0, jobs=jobs), where)

    opts: dict[str, Any] = {"powerable": frozenset(), "pending": {}, "pair_bytes_per_s": 1e6}
    assert choose_hosts(snap(0.5), _ask("a"), W, job_nodes=["x"], **opts) == {"a": "h4"}
    assert choose_hosts(snap(20.0), _ask("a"), W, job_nodes=["x"], **opts) == {"a": "h6"}
    # a running node whose class is unknown lends none: placed as a turtle
    unknown = dataclasses.replace(snap(20.0), unknown=frozenset({"x"}))
    assert choose_hosts(unknown, _ask("a"), W, job_nodes=["x"], **opts) == {"a": "h4"}
