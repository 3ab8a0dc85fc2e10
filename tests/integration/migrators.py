"""clavis-migrator agents on the testbed: one per host netns, started and ended by PID.

Steps are sent from the head's netns with clavisd's own client
(clavis.service.agents.MigratorClient), as clavisd would send them.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import tb

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy" / "testbed"))

from ctb import containers as ctb_containers
from ctb import state as ctb_state

PORT = 7781

# The hosts' names do not resolve in the head's netns: the address template is the
# agent's own address (no {host} in it).
_SEND = """
import sys
from pathlib import Path
from clavis.service.agents import MigratorClient
from clavis_contracts import MigrationStep
from clavis_contracts.keys import load_keys
keys_file, address, host, what, arg = sys.argv[1:6]
keys = {k.host: k for k in load_keys(Path(keys_file))}
c = MigratorClient(keys.get, address, 30.0)
if what == "send":
    st = c.send(MigrationStep.model_validate_json(arg))
else:
    st = c.status(host, arg)
print(st.model_dump_json())
"""


def _private(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o600)


def host_ip(testbed: dict[str, Any], host: str) -> str:
    ip: str = next(h["ip"] for h in testbed["hosts"] if h["name"] == host)
    return ip


class Agents:
    """One agent per named host, in that host's netns, state under ``root``."""

    def __init__(
        self,
        testbed: dict[str, Any],
        root: Path,
        hosts: list[str],
        cores: int,
        *,
        hook: str = "",
        precopy_rounds: int = 0,
    ) -> None:
        self.testbed, self.root, self.hook = testbed, root, hook
        self.precopy_rounds = precopy_rounds
        root.mkdir(parents=True, exist_ok=True)
        # a key per testbed host (a test may start an agent later, with start()):
        # clavisd's list (the client's) and each agent's own file
        self.keys = root / "agent-keys.toml"
        entries = {h: f'[[keys]]\nid = "{h}-1"\nhost = "{h}"\nsecret = "{secrets.token_hex(32)}"\n'
                   for h in (x["name"] for x in testbed["hosts"])}  # fmt: skip
        for h, entry in entries.items():
            _private(root / f"{h}.key.toml", entry)
        _private(self.keys, "".join(entries.values()))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        for host in hosts:
            self.start(host, cores)

    def state_dir(self, host: str) -> Path:
        return self.root / host

    def start(
        self,
        host: str,
        cores: int,
        pause_at: str = "",
        peer_timeout_s: float = 60.0,
        *,
        options: str = "",
        lxc_options: str = "",
    ) -> None:
        """``options`` and ``lxc_options``: more TOML lines, top-level and [lxc]."""
        cfg = self.root / f"{host}.toml"
        cfg.write_text(
            f'host = "{host}"\nlisten = "{host_ip(self.testbed, host)}"\nport = {PORT}\n'
            f'key_file = "{self.root / f"{host}.key.toml"}"\nstate_dir = "{self.state_dir(host)}"\n'
            f"cores = {cores}\nmemory_bytes = {16 * 2**30}\npeer_timeout_s = {peer_timeout_s}\n"
            f"precopy_rounds = {self.precopy_rounds}\n"
            + (f'network_hook = ["{self.hook}"]\n' if self.hook else "")
            + options
            + f'[lxc]\nlxcpath = "{tb.RUN_DIR / "lxc"}"\ncriu = "{self.testbed["criu"]}"\n'
            "netns_sysfs = true\n" + lxc_options
        )
        log = open(self.root / f"{host}.log", "ab")  # noqa: SIM115 (kept by the agent)
        env = dict(os.environ)
        env.pop("CLAVIS_MIGRATOR_PAUSE_AT", None)
        if pause_at:
            env["CLAVIS_MIGRATOR_PAUSE_AT"] = pause_at
        self.procs[host] = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/ctb-{host}", "--",
             sys.executable, "-m", "clavis_migrator", "--config", str(cfg)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + 20
        while f":{PORT} " not in tb.run(["ss", "-N", f"ctb-{host}", "-ltn"]):
            assert self.procs[host].poll() is None, self.log(host)
            assert time.monotonic() < deadline, self.log(host)
            time.sleep(0.2)

    def log(self, host: str) -> str:
        return (self.root / f"{host}.log").read_text(errors="replace")[-4000:]

    def explain(self, doc: dict[str, Any], *hosts: str) -> str:
        """Why a step ended as it did, in short lines (a CI summary folds long ones): its
        state and message one event a line, the tails of the CRIU logs it names, then the
        agents' logs."""
        lines = [f"step {doc.get('step_id')}: {doc.get('state')}"]
        message = str(doc.get("message", ""))
        lines += [f"  {event}" for event in message.split("; ")]
        for named in sorted(set(re.findall(r"see (/\S+\.log)", message))):
            path = Path(named)
            if path.is_file():
                tail = path.read_text(errors="replace").splitlines()[-25:]
                lines += [f"--- {named} (end)", *tail]
        for host in hosts:
            lines += [f"--- agent {host}", *self.log(host).splitlines()[-40:]]
        return "\n".join(lines)

    def kill(self, host: str) -> None:
        """kill -9 of one agent (nsenter execs it: the PID is the agent's)."""
        p = self.procs[host]
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=20)

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)

    def _client(self, host: str, what: str, arg: str) -> dict[str, Any]:
        out = tb.run(
            ["nsenter", "--net=/run/netns/ctb-core", "--", sys.executable, "-c", _SEND,
             str(self.keys), f"{host_ip(self.testbed, host)}:{PORT}", host, what, arg],
            timeout=120,
        )  # fmt: skip
        doc: dict[str, Any] = json.loads(out)
        return doc

    def send(self, step: dict[str, Any]) -> dict[str, Any]:
        return self._client(step["source"], "send", json.dumps(step))

    def wait(self, host: str, step_id: str, timeout: float = 240) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            doc = self._client(host, "status", step_id)
            if doc["state"] in ("done", "failed", "rolled_back"):
                return doc
            assert time.monotonic() < deadline, (doc, self.log(host))
            time.sleep(0.5)


def step(
    testbed: dict[str, Any],
    ids: tuple[int, int],
    container: str,
    source: str,
    target: str,
    *,
    deadline_s: float = 300,
) -> dict[str, Any]:
    plan, index = ids
    return {
        "step_id": f"{plan}:{index}", "plan": plan, "index": index, "wave": 0,
        "container": container, "source": source, "target": target,
        "target_address": f"{host_ip(testbed, target)}:{PORT}",
        "memory_bytes": 2**30, "cores": 1, "deadline_s": deadline_s,
    }  # fmt: skip


def lxc_state(container: str, host: str) -> str:
    """The container's LXC state as seen from ``host``'s netns (its monitor's socket)."""
    return tb.run(
        ["nsenter", f"--net=/run/netns/ctb-{host}", "--",
         "lxc-info", "-n", container, "-P", str(tb.RUN_DIR / "lxc"), "-s", "-H"]
    ).strip()  # fmt: skip


def _seen(testbed: dict[str, Any], container: str) -> tuple[list[str], list[str]]:
    """The hosts where ``container`` is RUNNING, and its LXC monitors (every host's
    processes are on this machine: a second copy would show here)."""
    hosts = [h["name"] for h in testbed["hosts"] if lxc_state(container, h["name"]) == "RUNNING"]
    ps = tb.run(["ps", "-eo", "args"])
    monitors = [ln for ln in ps.splitlines() if ln.startswith("[lxc monitor]")
                and ln.split()[-1] == container]  # fmt: skip
    return hosts, monitors


def running_on(testbed: dict[str, Any], container: str) -> list[str]:
    """The hosts where ``container`` is RUNNING; and it must have one LXC monitor only."""
    hosts, monitors = _seen(testbed, container)
    assert len(monitors) == len(hosts), (hosts, monitors)
    return hosts


def settled_on(testbed: dict[str, Any], container: str) -> list[str] | None:
    """running_on for a wait: None while a start, restore or stop is under way (a monitor
    whose container is not RUNNING yet, or no more), which is no copy too many."""
    hosts, monitors = _seen(testbed, container)
    return hosts if len(monitors) == len(hosts) else None


def send_home(
    testbed: dict[str, Any], root: Path, container: str, home: str, hook: str = ""
) -> None:
    """Leave the testbed as the other tests expect it: ``container`` on its own host
    (moved back by two fresh agents if a test ended with it elsewhere)."""
    if lxc_state(container, home) == "RUNNING":
        return
    names = [h["name"] for h in testbed["hosts"] if h["name"] != home]
    away = [h for h in names if lxc_state(container, h) == "RUNNING"]
    if away:
        a = Agents(testbed, root / "home", [home, away[0]], cores=8, hook=hook)
        try:
            a.send(step(testbed, (99, 0), container, away[0], home))
            a.wait(away[0], "99:0")
        except AssertionError as exc:  # the move back failed: the last resort below
            print(f"send_home: moving {container} back failed: {exc}", file=sys.stderr)
        finally:
            a.stop()
    if lxc_state(container, home) != "RUNNING":
        _restart_at_home(testbed, container, home, hook)


def _restart_at_home(testbed: dict[str, Any], container: str, home: str, hook: str) -> None:
    """send_home's last resort, so one failed test does not fail every later one: a node
    a failed move left nowhere (dumped, not restored) or that could not be moved back is
    stopped wherever it runs and started again at home, as after a crash (its job is
    lost); then Slurm takes it back (ReturnToService=2)."""
    st = ctb_state.load()
    assert st is not None, "no testbed state"
    (c,) = [x for x in st.topology.containers() if x.name == container]
    for h in (x["name"] for x in testbed["hosts"] if x["name"] != home):
        if lxc_state(container, h) == "RUNNING":
            tb.run(["nsenter", f"--net=/run/netns/ctb-{h}", "--", "lxc-stop", "-n", container,
                    "-P", str(tb.RUN_DIR / "lxc"), "-k"])  # fmt: skip
    if hook:
        tb.run([hook, "restored", container, home])
    ctb_containers.start(c)
    print(f"send_home: {container} started again on {home} (its job is lost)", file=sys.stderr)
    assert wait_until(
        lambda: tb.slurm(["sinfo", "-h", "-n", container, "-o", "%T"]).strip() == "idle", 90
    ), tb.slurm(["sinfo", "-h", "-n", container, "-o", "%T"])


def no_images_left(agents: Agents, hosts: list[str]) -> None:
    """Nothing half-moved: no image file in any agent's outgoing or incoming directory."""
    for host in hosts:
        for sub in ("outgoing", "incoming"):
            d = agents.state_dir(host) / sub
            left = [str(p) for p in d.rglob("*") if p.is_file()]
            assert not left, (host, sub, left)


def attach(container: str, host: str, shell: str) -> str:
    return tb.run(
        ["nsenter", f"--net=/run/netns/ctb-{host}", "--",
         "lxc-attach", "-n", container, "-P", str(tb.RUN_DIR / "lxc"), "--", "sh", "-c", shell]
    )  # fmt: skip


def wait_until(pred: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.2)
    return bool(pred())


def count_lines(f: Path) -> int:
    return len(f.read_text().split()) if f.exists() else 0


def start_job(testbed: dict[str, Any], node: str, lines: int) -> tuple[str, Path]:
    """A batch job on ``node`` writing one line every 0.1 s to a shared file."""
    # a file of its own: the job of a test that failed may still be writing to its file
    counter = Path(testbed["shared_dir"]) / f"migrator-job-{time.time_ns()}.count"
    tb.nodes_usable([node])
    out = tb.slurm(
        ["sbatch", "--parsable", "-w", node, "-N", "1", "-o", "/tmp/migrator-job.out",
         "--wrap", f"for i in $(seq 1 {lines}); do echo $i >> {counter}; sleep 0.1; done"]
    )  # fmt: skip
    assert wait_until(lambda: count_lines(counter) >= 10, 30), tb.slurm(["squeue"])
    return out.strip().split(";")[0], counter


def one_completed_run(job: str) -> None:
    """Accounting shows the job as one uninterrupted COMPLETED 0:0 run (-D: a requeued
    job would show twice)."""
    assert wait_until(
        lambda: (
            tb.slurm(["sacct", "-n", "-X", "-D", "-j", job, "-o", "State,ExitCode"]).split()
            == ["COMPLETED", "0:0"]
        ),
        60,
    ), tb.slurm(["sacct", "-D", "-j", job])


def job_ends_well(job: str, node: str, counter: Path, lines: int) -> None:
    """Every line written once in order, one uninterrupted COMPLETED run in accounting
    (-D: a requeued job would show twice), and the node takes new work."""
    assert wait_until(lambda: count_lines(counter) >= lines, 90), count_lines(counter)
    assert counter.read_text().split() == [str(i) for i in range(1, lines + 1)]
    one_completed_run(job)
    assert wait_until(
        lambda: tb.slurm(["sinfo", "-h", "-n", node, "-o", "%T"]).strip() == "idle", 30
    )
    assert tb.slurm(["srun", "-w", node, "-N", "1", "hostname"], timeout=60).strip() == node
