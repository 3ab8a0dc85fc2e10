"""`clavis-testbed up --stack` on the real testbed: clavisd in the head's netns, one
clavis-monitor per host in its netns, spank_clavis.so and select/clavis wired to them.

Within a bounded time every host's monitor has reported; clavisd lists every node
container on its host; a plain sbatch job's steps are registered with the monitor of the
host whose node ran it and with no other; the advice is fresh and readable by the slurm
user; `clavis repack --dry-run` answers with a plan or a no-change decision; `down`
leaves nothing behind. This module runs last (conftest.py): its last test takes the
whole testbed down.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from . import tb

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not tb.is_root(), reason="the testbed needs root"),
]

REPORT_DEADLINE_S = 60.0
HEAD_NETNS = "ctb-core"
VENV_BIN = Path(sys.executable).parent

_HTTP = """import json, sys, urllib.request
method, url, token, body = sys.argv[1:5]
req = urllib.request.Request(url, method=method, data=body.encode() if body else None)
req.add_header("Content-Type", "application/json")
if token:
    req.add_header("Authorization", "Bearer " + token)
try:
    with urllib.request.urlopen(req, timeout=10) as r:
        print(r.status); print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code); print(e.read().decode())
"""


def http(netns: str, method: str, url: str, token: str = "", body: Any = None) -> tuple[int, str]:
    """An HTTP request from inside a testbed netns (its addresses live only there)."""
    out = tb.run(
        ["nsenter", f"--net=/run/netns/{netns}", "--", sys.executable, "-c", _HTTP,
         method, url, token, json.dumps(body) if body is not None else ""]
    )  # fmt: skip
    code, _, text = out.partition("\n")
    return int(code), text


@pytest.fixture(scope="module")
def stack(testbed: dict[str, Any]) -> dict[str, Any]:
    """The stack, started on the session's running testbed; its passwords from up."""
    t0 = time.monotonic()
    cp = tb.tb("up", "--stack")
    m = re.search(r"UI logins, shown this once .*: admin / (\S+), viewer / (\S+)", cp.stdout)
    assert m, cp.stdout
    st = tb.status()
    assert st["up"] and st["stack"] is not None, st.get("problems")
    return {"status": st, "admin": m.group(1), "viewer": m.group(2), "up_s": time.monotonic() - t0,
            "stdout": cp.stdout}  # fmt: skip


def _login(st: dict[str, Any], role: str, password: str) -> str:
    code, text = http(HEAD_NETNS, "POST", st["stack"]["clavisd"]["url"] + "/api/v1/login",
                      body={"user": role, "password": password})  # fmt: skip
    assert code == 200, text
    token: str = json.loads(text)["token"]
    return token


def _nodes(st: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: h["name"] for h in st["hosts"] for c in h["containers"]}


def test_every_host_reports_and_clavisd_lists_every_container_on_its_host(
    stack: dict[str, Any],
) -> None:
    st = stack["status"]
    # up waits for every host's first report (bounded); status shows them flowing
    assert stack["up_s"] < REPORT_DEADLINE_S + 30
    monitors = st["stack"]["monitors"]
    assert set(monitors) == {h["name"] for h in st["hosts"]}
    for host, m in monitors.items():
        assert m["last_report_age_s"] is not None and m["last_report_age_s"] < 10, (host, m)
    assert all(d["alive"] for d in st["stack"]["daemons"]), st["stack"]["daemons"]
    text = tb.tb("status").stdout
    for host in monitors:
        assert re.search(rf"monitor {host}: running, last report \d+\.\ds ago", text), text
    # a migrator per host in its netns, on the host's address, answering; clavisd's
    # config names each (the host names do not resolve in the head's netns)
    migrators = st["stack"]["migrators"]
    ips = {h["name"]: h["ip"] for h in st["hosts"]}
    assert set(migrators) == set(ips), migrators
    conf = Path(st["stack"]["clavisd"]["config"]).read_text()
    for host, a in migrators.items():
        assert a["running"] and a["answer"] == "answers", (host, a)
        assert a["address"] == f"{ips[host]}:7781" and a["netns"] == f"ctb-{host}", a
        assert f'"{host}" = "{ips[host]}:7781"' in conf, conf
        assert re.search(rf"migrator {host}: running, {ips[host]}:7781 answers", text), text
    token = _login(st, "viewer", stack["viewer"])
    url = st["stack"]["clavisd"]["url"]
    nodes = _nodes(st)
    deadline = time.monotonic() + REPORT_DEADLINE_S
    listed: dict[str, str] = {}
    while time.monotonic() < deadline:
        code, text = http(HEAD_NETNS, "GET", url + "/api/v1/containers", token)
        assert code == 200, text
        listed = {c["name"]: c["host"] for c in json.loads(text)}
        if listed == nodes:
            break
        time.sleep(1)
    assert listed == nodes
    # each monitor reads its own BMC over IPMI LAN+ (the management network)
    deadline = time.monotonic() + 30
    watts: dict[str, Any] = {}
    while time.monotonic() < deadline:
        code, text = http(HEAD_NETNS, "GET", url + "/api/v1/hosts", token)
        assert code == 200, text
        watts = {h["name"]: h["watts"] for h in json.loads(text)}
        if all(w is not None for w in watts.values()):
            break
        time.sleep(1)
    assert set(watts) == set(monitors) and all(w is not None and w > 0 for w in watts.values())
    # the viewer reads but may not act; the admin's password works too
    code, _ = http(HEAD_NETNS, "POST", url + "/api/v1/repack", token, {"apply": False})
    assert code == 403
    assert _login(st, "admin", stack["admin"])
    # the passwords were shown once: neither is in any file up wrote
    for path in Path(tb.RUN_DIR).rglob("*"):
        if path.is_file() and path.stat().st_size < 1 << 20:
            data = path.read_bytes()
            assert stack["admin"].encode() not in data and stack["viewer"].encode() not in data


def _registrations(st: dict[str, Any]) -> dict[str, int]:
    """Accepted registrations per host, from each monitor's /metrics in its netns."""
    out = {}
    for host, m in st["stack"]["monitors"].items():
        code, text = http(m["netns"], "GET", m["metrics"])
        assert code == 200, text
        found = re.search(r'^clavis_monitor_registrations_total\{result="accepted"\} (\S+)$',
                          text, re.M)  # fmt: skip
        out[host] = int(float(found.group(1))) if found else 0
    return out


def test_a_plain_sbatch_jobs_steps_reach_the_monitor_of_its_own_host(
    stack: dict[str, Any],
) -> None:
    st = stack["status"]
    nodes = _nodes(st)
    # one node in the first rack, one in the last: different hosts, different monitors
    for node in (min(nodes), max(nodes)):
        before = _registrations(st)
        tb.slurm(["sbatch", "--wait", "-w", node, "-o", "/dev/null", "-t", "2",
                  "--wrap", "srun -n1 true; sleep 0.2"], timeout=120)  # fmt: skip
        deadline = time.monotonic() + 15
        delta: dict[str, int] = {}
        while time.monotonic() < deadline:
            after = _registrations(st)
            delta = {h: after[h] - before[h] for h in after}
            # the batch and the srun step: each registered and deregistered
            if delta[nodes[node]] >= 4:
                break
            time.sleep(0.3)
        assert delta[nodes[node]] >= 4, (node, delta)
        assert all(d == 0 for h, d in delta.items() if h != nodes[node]), (node, delta)


def test_the_advice_is_fresh_and_readable_by_the_slurm_user(stack: dict[str, Any]) -> None:
    st = stack["status"]
    advice = Path(st["stack"]["advice"]["path"])
    select = st["select"]
    if select["type"] == "select/clavis":
        conf = Path(select["config"]).read_text()
        assert f"AdvicePath={advice}\n" in conf, conf
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not advice.exists():
        time.sleep(0.5)
    text = tb.run(["runuser", "-u", "slurm", "--", "cat", str(advice)])
    doc = json.loads(text)
    generated = doc["generated"].replace("Z", "+00:00")
    age = time.time() - dt.datetime.fromisoformat(generated).timestamp()
    assert 0 <= age < doc["valid_s"], (age, doc["valid_s"])
    assert {n["node"]: n["host"] for n in doc["nodes"]} == _nodes(st)
    mode = advice.stat().st_mode & 0o777
    assert mode == 0o640, oct(mode)
    # the agent keys stay root's
    for key in ("agent_keys_file",):
        secret = Path(st["stack"]["clavisd"][key])
        assert secret.stat().st_mode & 0o777 == 0o600
        cp = subprocess.run(["runuser", "-u", "slurm", "--", "cat", str(secret)],
                            capture_output=True, timeout=30, check=False)  # fmt: skip
        assert cp.returncode != 0


def test_repack_dry_run_against_the_testbeds_clavisd(stack: dict[str, Any]) -> None:
    st = stack["status"]
    conf = st["stack"]["clavisd"]["config"]
    cp = subprocess.run(
        ["nsenter", f"--net=/run/netns/{HEAD_NETNS}", "--", str(VENV_BIN / "clavis"),
         "repack", "--dry-run", "--config", conf, "--timeout", "120"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    out = cp.stdout
    m = re.search(r"^decision: (\S+)", out, re.M)
    assert m, (cp.returncode, out, cp.stderr)
    assert m.group(1) in {"planned", "no-change", "below-margin"}, out
    assert cp.returncode == 0, (out, cp.stderr)
    if m.group(1) == "planned":
        assert "dry-run plan (not stored)" in out, out


def test_down_removes_the_stack_with_everything_else(stack: dict[str, Any]) -> None:
    pids = [d["pid"] for d in stack["status"]["stack"]["daemons"]]
    # clavisd, and a monitor and a migrator per host
    assert len(pids) == 1 + 2 * len(stack["status"]["hosts"])
    # LXC's helper cgroup lxc.pivot is ours to remove only when up found none (another
    # LXC user on the machine may have made it first): the state file says which.
    state = json.loads((tb.RUN_DIR / "state.json").read_text())
    before = {k: [] for k in tb.snapshot()}
    if state.get("pivot_existed", True):
        before["cgroups"] = [c for c in tb.snapshot()["cgroups"] if c.endswith("/lxc.pivot")]
    tb.tb("down")
    assert tb.live_pids(pids) == []
    left = tb.left_behind(before)
    assert left == {}, left
