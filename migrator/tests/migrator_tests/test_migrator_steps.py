"""The step machine between two real agents on loopback (backend: world.TableBackend)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from clavis_contracts.keys import AgentKey
from clavis_migrator.agent import Agent
from clavis_migrator.store import StepStore

from .world import Table, TableBackend, files_under, make_agent, post, step, table, wait_terminal


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Agent, TableBackend, Agent, TableBackend, Table]]:
    t = table("c1", "c2", memory=50_000)
    t.where["c3"] = "h2"  # runs on the target
    t.memory["c3"], t.sizes["c3"] = b"x", t.sizes["c1"]
    a1, b1 = make_agent(tmp_path, "h1", t)
    a2, b2 = make_agent(tmp_path, "h2", t, cores=2, memory_bytes=3 * 2**30)
    yield a1, b1, a2, b2, t
    a1.stop()
    a2.stop()


def test_a_step_moves_the_container_and_cleans_both_hosts(pair, tmp_path: Path) -> None:
    a1, _, a2, _, t = pair
    before = t.memory["c1"]
    first = post(a1.port, step(a2.port))
    assert first["state"] in ("accepted", "running", "done")
    done = wait_terminal(a1.port, "1:0")
    assert done["state"] == "done", done
    assert t.where["c1"] == "h2" and t.memory["c1"] == before  # every byte arrived
    assert "committed: c1 runs on h2" in done["message"]
    assert done["seconds"] is not None
    assert done["schema_version"] == 2 and done["bytes_moved"] == len(before) + 3
    assert 0 < done["frozen_s"] <= done["seconds"] and done["precopy_rounds"] == 0
    rec = a1.store.get("1:0")
    assert rec is not None and rec.bytes_moved == len(before) + 3 and rec.frozen_s is not None
    # 50,000 bytes in 4,096-byte chunks: many signed PUTs, all checked at the end
    assert files_under(tmp_path / "h1" / "outgoing") == []
    assert files_under(tmp_path / "h2" / "incoming") == []
    # the target commits first: the source's state goes once the target has said so
    assert t.calls == [
        "checkpoint c1 on h1",
        "restore c1 on h2",
        "commit c1 on h2",
        "commit c1 on h1",
    ]
    assert (tmp_path / "h2" / "ended" / "1_0").read_text() == "committed"


def test_a_step_id_seen_before_is_a_status_query_also_after_a_restart(pair, tmp_path: Path) -> None:
    a1, _, a2, _, t = pair
    s = step(a2.port)
    post(a1.port, s)
    assert wait_terminal(a1.port, "1:0")["state"] == "done"
    again = post(a1.port, s)
    assert again["state"] == "done"
    a1.stop()
    a1b, _ = make_agent(tmp_path, "h1", t)  # same state_dir: a restarted agent
    try:
        assert wait_terminal(a1b.port, "1:0")["state"] == "done"
        assert post(a1b.port, s)["state"] == "done"
    finally:
        a1b.stop()
    assert t.calls.count("checkpoint c1 on h1") == 1  # never ran twice
    assert t.where["c1"] == "h2"


def _until(pred: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def _refused(a1: Agent, s, word: str) -> str:
    doc = post(a1.port, s)
    assert doc["state"] == "failed", doc
    assert doc["message"].startswith("refused") or "refused" in doc["message"], doc
    assert word in doc["message"], doc
    return str(doc["message"])


def test_refusals_name_their_reason_and_nothing_moves(pair) -> None:
    a1, _, a2, _, t = pair
    _refused(a1, step(a2.port, container="nope"), "unknown on h1")
    _refused(a1, step(a2.port, container="c3", index=1), "does not run on h1")
    _refused(a1, step(a2.port, index=2, source="h9", target="h2"), "not the step's source h9")
    # the target has 2 cores, c3 uses 1: a 2-core container does not fit
    s = step(a2.port, index=3, cores=2)
    post(a1.port, s)
    doc = wait_terminal(a1.port, "1:3")
    assert doc["state"] == "failed" and "over its cores: 1 in use + 2 > 2" in doc["message"], doc
    post(a1.port, step(a2.port, index=4, memory_bytes=2 * 2**30 + 1))
    doc = wait_terminal(a1.port, "1:4")
    assert doc["state"] == "failed" and "over its memory" in doc["message"], doc
    # the address is an agent, but of another host: it cannot check the step's peer key
    # (derived from h7's key), so its answer is not signed with it
    post(a1.port, step(a2.port, index=5, target="h7"))
    doc = wait_terminal(a1.port, "1:5")
    assert doc["state"] == "failed" and "not this step's target migrator" in doc["message"], doc
    assert "c1 still runs on h1" in doc["message"] or "still runs on h1" in doc["message"]
    assert t.where == {"c1": "h1", "c2": "h1", "c3": "h2"}
    assert not any(c.startswith("checkpoint") for c in t.calls)


def test_a_second_step_on_the_same_container_is_refused(pair) -> None:
    a1, b1, a2, _, t = pair
    b1.hold = threading.Event()
    post(a1.port, step(a2.port))
    doc = post(a1.port, step(a2.port, index=1))
    assert doc["state"] == "failed"
    assert "c1 is already being moved by step 1:0" in doc["message"]
    b1.hold.set()
    assert wait_terminal(a1.port, "1:0")["state"] == "done"
    assert t.calls.count("checkpoint c1 on h1") == 1


def test_a_target_with_another_key_is_not_trusted(tmp_path: Path) -> None:
    t = table("c1")
    a1, _ = make_agent(tmp_path, "h1", t)
    # not the key clavisd derived the step's peer key from: an impostor at h2's address
    other = AgentKey(id="h2-k1", host="h2", secret="some-other-secret-abcdefghij")
    a2, _ = make_agent(tmp_path, "h2", t, key=other)
    try:
        post(a1.port, step(a2.port))
        doc = wait_terminal(a1.port, "1:0")
    finally:
        a1.stop()
        a2.stop()
    assert doc["state"] == "failed", doc
    assert "not this step's target migrator" in doc["message"]
    assert t.where["c1"] == "h1" and t.calls == []


def test_a_failed_restore_on_the_target_rolls_back_to_the_source(pair, tmp_path: Path) -> None:
    a1, _, a2, b2, t = pair
    b2.fail.add("restore")
    post(a1.port, step(a2.port))
    doc = wait_terminal(a1.port, "1:0")
    assert doc["state"] == "rolled_back", doc
    assert "restore on h2 failed: criu restore: injected failure" in doc["message"]
    assert "rolled back: restored on h1" in doc["message"]
    assert doc["frozen_s"] > 0  # it was stopped until restored on the source
    assert t.where["c1"] == "h1"
    assert files_under(tmp_path / "h2" / "incoming") == []  # the target dropped its images
    assert files_under(tmp_path / "h1" / "outgoing") == []


def test_a_failed_verify_kills_the_target_copy_then_rolls_back(pair) -> None:
    a1, _, a2, b2, t = pair
    b2.fail.add("verify")
    post(a1.port, step(a2.port))
    doc = wait_terminal(a1.port, "1:0")
    assert doc["state"] == "rolled_back", doc
    assert "kill c1 on h2" in t.calls
    assert t.where["c1"] == "h1"  # running exactly once, on the source


def test_connections_not_back_on_the_target_roll_back_and_on_the_source_are_said(
    pair, tmp_path: Path
) -> None:
    """A restore whose TCP connections or slurmd are not back (NotVerifiedError) is
    undone on the target like any failed verify; on the source, after the rollback,
    the same finding keeps the container running there (there is nowhere better) and
    the status says it."""
    a1, b1, a2, b2, t = pair
    b1.fail.add("verify-checks")
    b2.fail.add("verify-checks")
    post(a1.port, step(a2.port))
    doc = wait_terminal(a1.port, "1:0")
    assert doc["state"] == "rolled_back", doc
    assert "restore on h2 failed: c1: TCP connections not established" in doc["message"]
    assert "kill c1 on h2" in t.calls
    assert "rolled back: restored on h1 (RUNNING, but c1: TCP connections" in doc["message"]
    assert "resume c1 on h1" in t.calls  # verify left it stopped: it runs again
    assert t.where["c1"] == "h1"
    assert files_under(tmp_path / "h1" / "outgoing") == []


def test_a_target_gone_mid_transfer_rolls_back(pair) -> None:
    a1, b1, a2, _, t = pair
    # the target agent dies while the source dumps: every transfer attempt fails
    b1.hold = threading.Event()
    post(a1.port, step(a2.port))
    _until(lambda: "checkpoint c1 on h1" in t.calls)
    a2.stop()
    b1.hold.set()
    doc = wait_terminal(a1.port, "1:0", timeout=30)
    assert doc["state"] == "rolled_back", doc
    assert "failed 3 times" in doc["message"] and "unreachable" in doc["message"]
    assert t.where["c1"] == "h1"


def test_a_failed_checkpoint_leaves_the_container_running(pair) -> None:
    a1, b1, a2, _, t = pair
    b1.fail.add("checkpoint")
    post(a1.port, step(a2.port))
    doc = wait_terminal(a1.port, "1:0")
    assert doc["state"] == "failed", doc
    assert "checkpoint on h1 failed" in doc["message"] and "still runs on h1" in doc["message"]
    assert doc["frozen_s"] is None and doc["bytes_moved"] == 0
    assert t.where["c1"] == "h1" and "restore c1 on h1" not in t.calls


def test_a_checkpoint_that_failed_after_stopping_restores_on_the_source(pair) -> None:
    a1, b1, a2, _, t = pair
    b1.fail.add("checkpoint-stopped")
    post(a1.port, step(a2.port))
    doc = wait_terminal(a1.port, "1:0")
    assert doc["state"] == "rolled_back", doc
    assert t.where["c1"] == "h1" and "restore c1 on h1" in t.calls


def test_an_agent_killed_mid_step_undoes_it_at_restart(tmp_path: Path) -> None:
    t = table("c1")
    a2, _ = make_agent(tmp_path, "h2", t)
    # What a kill -9 during the transfer leaves on the source: the record says
    # "transfer", the images are in outgoing/, the container is stopped.
    store = StepStore(tmp_path / "h1" / "steps")
    s = step(a2.port)
    rec = store.add(s, "accepted")
    store.update(rec, state="running", phase="transfer")
    images = tmp_path / "h1" / "outgoing" / "1_0"
    images.mkdir(parents=True)
    (images / "inventory.img").write_bytes(b"inv")
    (images / "pages-1.img").write_bytes(t.memory["c1"])
    t.where["c1"] = None
    a1, _ = make_agent(tmp_path, "h1", t)
    try:
        doc = wait_terminal(a1.port, "1:0")
        assert post(a1.port, s)["state"] == "rolled_back"  # and it never runs again
    finally:
        a1.stop()
        a2.stop()
    assert doc["state"] == "rolled_back", doc
    assert "agent restarted during phase transfer" in doc["message"]
    assert "rolled back: restored on h1" in doc["message"]
    assert t.where["c1"] == "h1" and t.calls == ["restore c1 on h1"]
    on_disk = json.loads((tmp_path / "h1" / "steps" / "1_0.json").read_text())
    assert on_disk["state"] == "rolled_back"


def _hook(tmp_path: Path, fail_on: str = "") -> tuple[Path, Path]:
    calls = tmp_path / "hook.calls"
    script = tmp_path / "hook.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {calls}\n'
        f'if [ "$3" = "{fail_on}" ]; then echo "no route to $2" >&2; exit 3; fi\n'
        'echo "route for $2 via $3"\n'
    )
    script.chmod(0o755)
    return script, calls


def test_the_network_hook_runs_where_the_container_was_restored(tmp_path: Path) -> None:
    script, calls = _hook(tmp_path)
    t = table("c1", "c2")
    a1, _ = make_agent(tmp_path, "h1", t, network_hook=[str(script)])
    a2, b2 = make_agent(tmp_path, "h2", t, network_hook=[str(script)])
    try:
        post(a1.port, step(a2.port))
        done = wait_terminal(a1.port, "1:0")
        b2.fail.add("restore")
        post(a1.port, step(a2.port, container="c2", index=1))
        back = wait_terminal(a1.port, "1:1")
    finally:
        a1.stop()
        a2.stop()
    assert done["state"] == "done" and "network hook: route for c1 via h2" in done["message"]
    assert back["state"] == "rolled_back" and "route for c2 via h1" in back["message"]
    assert calls.read_text().splitlines() == ["restored c1 h2", "restored c2 h1"]


def test_a_failing_network_hook_on_the_target_undoes_the_move(tmp_path: Path) -> None:
    script, calls = _hook(tmp_path, fail_on="h2")
    t = table("c1")
    a1, _ = make_agent(tmp_path, "h1", t, network_hook=[str(script)])
    a2, _ = make_agent(tmp_path, "h2", t, network_hook=[str(script)])
    try:
        post(a1.port, step(a2.port))
        doc = wait_terminal(a1.port, "1:0")
    finally:
        a1.stop()
        a2.stop()
    assert doc["state"] == "rolled_back", doc
    assert "exited 3: no route to c1" in doc["message"]
    assert t.where["c1"] == "h1" and "kill c1 on h2" in t.calls
    assert calls.read_text().splitlines() == ["restored c1 h2", "restored c1 h1"]


def test_an_interrupted_transfer_restarts_from_nothing(pair, tmp_path: Path) -> None:
    a1, b1, a2, _, t = pair
    before = t.memory["c1"]
    b1.hold = threading.Event()
    post(a1.port, step(a2.port))
    _until(lambda: "checkpoint c1 on h1" in t.calls)
    # what an earlier, broken attempt would leave on the target: a part of a file
    stale = tmp_path / "h2" / "incoming" / "1_0" / "images" / "pages-1.img"
    stale.write_bytes(b"left over")
    b1.hold.set()
    doc = wait_terminal(a1.port, "1:0")
    assert doc["state"] == "done", doc
    assert (
        "restarted after attempt 1: pages-1.img: chunk at offset 0, file has 9 bytes"
        in (doc["message"])
    )
    assert t.where["c1"] == "h2" and t.memory["c1"] == before


def test_a_step_past_its_deadline_rolls_back(pair) -> None:
    a1, b1, a2, _, t = pair
    b1.hold = threading.Event()
    post(a1.port, step(a2.port, deadline_s=0.5))
    _until(lambda: "checkpoint c1 on h1" in t.calls)
    time.sleep(0.7)
    b1.hold.set()
    doc = wait_terminal(a1.port, "1:0")
    assert doc["state"] == "rolled_back", doc
    assert "deadline of 0.5 s passed before the transfer" in doc["message"]
    assert t.where["c1"] == "h1"


def test_a_bug_during_the_rollback_ends_the_step_and_says_so(pair) -> None:
    a1, b1, a2, b2, _ = pair
    b2.fail.add("restore")
    b1.fail.add("restore-bug")
    post(a1.port, step(a2.port))
    doc = wait_terminal(a1.port, "1:0")
    assert doc["state"] == "failed", doc
    assert (
        "INTERNAL ERROR while ending the step (RuntimeError('a bug in the backend'))"
        in (doc["message"])
    )


def test_a_restarted_target_drops_images_it_never_restored(tmp_path: Path) -> None:
    incoming = tmp_path / "h2" / "incoming"
    for name, restored in (("5_0", False), ("5_1", True)):
        (incoming / name / "images").mkdir(parents=True)
        (incoming / name / "images" / "pages-1.img").write_bytes(b"x")
        if restored:
            (incoming / name / "restored").write_text("1")
    a2, _ = make_agent(tmp_path, "h2", table("c1"))
    a2.stop()
    assert files_under(incoming) == ["5_1/images/pages-1.img", "5_1/restored"]
