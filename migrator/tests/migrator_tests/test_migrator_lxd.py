"""The LXD/Incus backend against answers recorded from a real LXD 5.0.2 (``lxd/``, see its
README), served by real HTTP servers on UNIX sockets, one per host's daemon.

``FakeLxd`` keeps each daemon's instances and operations and answers every request with
the recorded answer of that kind (ids, names and statuses set to this run's); a target's
pull of an instance succeeds only with the operation URL, secrets and certificate the
source's daemon handed out. The migrator's real client, backend, step machine and two
real agents on loopback run against them. Cases: a move; the stateful stop refused (no
CRIU); the stateful start failing on the target (the recorded CRIU restore failure), the
pull failing and a restored instance with another MAC, each rolled back to the source;
an unknown instance; no socket.
"""

from __future__ import annotations

import copy
import json
import socketserver
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from clavis_migrator.agent import Agent
from clavis_migrator.backend import BackendError, Size
from clavis_migrator.cli import make_backend
from clavis_migrator.config import ConfigError, parse
from clavis_migrator.lxc import LxcBackend
from clavis_migrator.lxd import LxdBackend, Ticket, differences, kept_config, size_of
from clavis_migrator.lxdapi import LxdError, parse_answer

from .world import KEYS, post, step, wait_terminal, write_key_file

ANSWERS = Path(__file__).parent / "lxd"
C1_MAC = "00:16:3e:c1:a0:01"


def recorded(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((ANSWERS / f"{name}.json").read_text())
    return doc


@dataclass
class Network:
    """What the daemons share: the migration source operations, by their HTTPS URL."""

    sources: dict[str, tuple[FakeLxd, str, dict[str, str]]] = field(default_factory=dict)


class _Handler(BaseHTTPRequestHandler):
    server: FakeLxd

    def _answer(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else None
        with self.server.lock:
            self.server.seen.append(f"{self.command} {self.path}")
            self.server.bodies.append(body)
            status, doc = self.server.route(self.command, self.path, body)
        raw = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        self._answer()

    def do_PUT(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def do_DELETE(self) -> None:
        self._answer()

    def log_message(self, format: str, *args: object) -> None:
        pass


class FakeLxd(socketserver.ThreadingUnixStreamServer):
    """One host's daemon: its instances and operations, recorded answers for each request."""

    daemon_threads = True

    def __init__(self, path: Path, address: str, net: Network) -> None:
        super().__init__(str(path), _Handler)
        self.address, self.net = address, net
        self.instances: dict[str, dict[str, Any]] = {}
        self.ops: dict[str, dict[str, Any]] = {}  # id -> the recorded wait answer, adjusted
        # "no-criu", "no-migration", "restore-fails", "pull-fails", "other-mac"
        self.faults: set[str] = set()
        self.seen: list[str] = []
        self.bodies: list[Any] = []
        self.lock = threading.Lock()
        self.cert = recorded("server")["metadata"]["environment"]["certificate"] + address
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self.thread.join(timeout=5)

    def add_running(self, name: str) -> None:
        """The recorded running container, under ``name``."""
        inst = recorded("instance-running")["metadata"]
        self.instances[name] = {**inst, "name": name}

    # ---------------------------------------------------------------- answers

    def _op(self, created: str, final: str, resource: str, **meta: Any) -> dict[str, Any]:
        """The recorded async answer ``created``; ``final`` is what its wait will answer."""
        op_id = str(uuid.uuid4())
        doc = recorded(created)
        doc["operation"] = f"/1.0/operations/{op_id}"
        doc["metadata"].update(id=op_id, resources={"instances": [resource]}, **meta)
        end = recorded(final)
        end["metadata"].update(id=op_id, resources={"instances": [resource]})
        self.ops[op_id] = end
        return doc

    def route(self, method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        url, _, query = path.partition("?")
        parts = url.strip("/").split("/")
        if url == "/1.0":
            doc = recorded("server")
            doc["metadata"]["environment"]["certificate"] = self.cert
            return 200, doc
        if url == "/1.0/instances" and method == "GET" and query == "recursion=1":
            doc = recorded("instances-running")
            doc["metadata"] = list(self.instances.values())
            return 200, doc
        if url == "/1.0/instances" and method == "POST":
            return self._pull(body)
        if parts[:2] == ["1.0", "operations"] and parts[-1] == "wait":
            end = self.ops.get(parts[2])
            return (200, end) if end else (404, recorded("error-404-operation"))
        if parts[:2] != ["1.0", "instances"] or len(parts) < 3:
            return 404, recorded("error-404-instance")
        name = parts[2]
        inst = self.instances.get(name)
        if inst is None:
            return 404, recorded("error-404-instance")
        res = f"/1.0/instances/{name}"
        if len(parts) == 4 and parts[3] == "state":
            return self._state(name, inst, method, body)
        if method == "GET":
            doc = recorded("instance-running")
            doc["metadata"] = inst
            return 200, doc
        if method == "POST" and body.get("migration") and "no-migration" in self.faults:
            # derived: the recorded error answer with a status and message of this case
            doc = recorded("delete-running")
            doc.update(error_code=500, error="Failed to create migration source")
            return 500, doc
        if method == "POST" and body.get("migration"):
            src = recorded("migrate-source")
            secrets = {k: uuid.uuid4().hex for k in src["metadata"]["metadata"]}
            doc = self._op("migrate-source", "op-migrate-source", res, metadata=secrets)
            url_ = f"https://{self.address}{doc['operation']}"
            self.net.sources[url_] = (self, name, secrets)
            return 202, doc
        if method == "DELETE":
            if inst["status"] == "Running":
                return 400, recorded("delete-running")
            del self.instances[name]
            return 202, self._op("delete", "op-delete", res)
        return 404, recorded("error-404-instance")

    def _state(
        self, name: str, inst: dict[str, Any], method: str, body: Any
    ) -> tuple[int, dict[str, Any]]:
        res = f"/1.0/instances/{name}"
        if method == "GET":
            doc = recorded("state-running")
            if inst["status"] != "Running":  # derived: LXD's stopped state has pid 0
                doc["metadata"].update(status=inst["status"], pid=0, processes=0, network={})
            elif "other-mac" in self.faults:  # derived: a restore that came up wrong
                doc["metadata"]["network"]["eth0"]["hwaddr"] = "00:16:3e:00:00:99"
            return 200, doc
        action, stateful = body.get("action"), bool(body.get("stateful"))
        if action == "stop" and stateful:
            if "no-criu" in self.faults:
                return 202, self._op("stop-stateful", "op-stop-stateful-nocriu", res)
            inst.update(status="Stopped", status_code=102, stateful=True)
            return 202, self._op("stop-stateful", "op-stop-stateful", res)
        if action == "stop":
            inst.update(status="Stopped", status_code=102)
            return 202, self._op("stop-stateful", "op-stop-force", res)
        if action == "start" and stateful:
            if not inst.get("stateful"):
                return 202, self._op("stop-stateful", "op-start-stateful-nostate", res)
            if "restore-fails" in self.faults:
                return 202, self._op("stop-stateful", "op-start-stateful-failed", res)
            # derived: the recorded successful start (CRIU restores fail on this machine)
            inst.update(status="Running", status_code=103, stateful=False)
            return 202, self._op("stop-stateful", "op-start", res)
        return 404, recorded("error-404-instance")

    def _pull(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """``POST /1.0/instances`` with a migration source: fetch from the source daemon."""
        src = body["source"]
        name, res = body["name"], f"/1.0/instances/{body['name']}"
        found = self.net.sources.get(src["operation"])
        fails = "pull-fails" in self.faults or found is None
        if found is not None:
            daemon, from_name, secrets = found
            fails = fails or src["secrets"] != secrets or src["certificate"] != daemon.cert
            fails = fails or src["mode"] != "pull" or src["type"] != "migration"
        if fails:
            return 202, self._op("migrate-sink", "op-migrate-sink-live-failed", res)
        with daemon.lock:
            moved = copy.deepcopy(daemon.instances[from_name])
        moved.update(
            name=name, config=body["config"], devices=body["devices"], profiles=body["profiles"],
            status="Stopped", status_code=102, stateful=bool(body.get("stateful")),
        )  # fmt: skip
        self.instances[name] = moved
        return 202, self._op("migrate-sink", "op-migrate-sink", res)


# -------------------------------------------------------------------- fixtures


@pytest.fixture
def net() -> Network:
    return Network()


@pytest.fixture
def daemons(tmp_path: Path, net: Network) -> Iterator[dict[str, FakeLxd]]:
    d = {
        h: FakeLxd(tmp_path / f"{h}-lxd.socket", f"10.0.0.{i}:8443", net)
        for i, h in enumerate(("h1", "h2"), 1)
    }
    d["h1"].add_running("c1")
    try:
        yield d
    finally:
        for x in d.values():
            x.stop()


def lxd_agent(tmp: Path, host: str, daemon_socket: str, address: str) -> Agent:
    doc = {
        "host": host, "listen": "127.0.0.1", "port": 0,
        "key_file": str(write_key_file(tmp / f"{host}.key.toml", KEYS[host])),
        "state_dir": str(tmp / host), "cores": 4, "memory_bytes": 4 * 2**30,
        "peer_timeout_s": 5.0, "backend": "lxd",
        "lxd": {"socket": daemon_socket, "address": address, "timeout_s": 10.0,
                "request_timeout_s": 5.0},
    }  # fmt: skip
    cfg = parse(doc)
    backend = LxdBackend(cfg.lxd, host, Path(cfg.state_dir), announcer=lambda pid: f"pid {pid}")
    agent = Agent(cfg, (KEYS[host],), backend)
    agent.start()
    return agent


@pytest.fixture
def agents(tmp_path: Path, daemons: dict[str, FakeLxd]) -> Iterator[dict[str, Agent]]:
    a = {h: lxd_agent(tmp_path, h, str(d.server_address), d.address) for h, d in daemons.items()}
    try:
        yield a
    finally:
        for x in a.values():
            x.stop()


def _move(agents: dict[str, Agent], container: str = "c1") -> dict[str, Any]:
    s = step(agents["h2"].port, container=container, memory_bytes=2**28)
    post(agents["h1"].port, s)
    return wait_terminal(agents["h1"].port, s.step_id)


# -------------------------------------------------------------------- the steps


def test_a_move_pulls_the_stopped_instance_and_starts_it_with_its_state(
    tmp_path: Path, daemons: dict[str, FakeLxd], agents: dict[str, Agent]
) -> None:
    src, dst = daemons["h1"], daemons["h2"]
    doc = _move(agents)
    assert doc["state"] == "done", doc["message"]
    assert "MACs and 1 IPv4 address(es) kept, announced pid " in doc["message"]
    # the source: stateful stop, a migration source operation, and its copy deleted at commit
    assert [b for b in src.bodies if b and "action" in b] == [
        {"action": "stop", "stateful": True, "timeout": 10}
    ]
    assert {"name": "c1", "migration": True, "live": False, "instance_only": True} in src.bodies
    assert "DELETE /1.0/instances/c1" in src.seen and "c1" not in src.instances
    # the target pulled it from the source daemon's address with its secrets and started it
    pull = next(b for b in dst.bodies if b and "source" in b)
    assert pull["source"]["operation"].startswith("https://10.0.0.1:8443/1.0/operations/")
    assert pull["stateful"] is True and pull["source"]["mode"] == "pull"
    assert pull["devices"]["eth0"]["hwaddr"] == C1_MAC
    assert not any(k.startswith("volatile.") and not k.endswith("hwaddr") for k in pull["config"])
    assert {"action": "start", "stateful": True} in dst.bodies
    assert dst.instances["c1"]["status"] == "Running"
    # nothing left behind: no images, no ticket of a pulled instance
    for h in ("h1", "h2"):
        left = [p for p in (tmp_path / h).rglob("*") if p.is_file() and "steps" not in p.parts]
        assert [p.name for p in left if p.suffix == ".json" or "outgoing" in p.parts] == []


def test_a_stateful_stop_refused_leaves_the_container_running(
    daemons: dict[str, FakeLxd], agents: dict[str, Agent]
) -> None:
    daemons["h1"].faults.add("no-criu")
    doc = _move(agents)
    assert doc["state"] == "failed", doc["message"]
    assert "stateful stop of c1 refused" in doc["message"]
    assert "CRIU isn't installed" in doc["message"]
    assert daemons["h1"].instances["c1"]["status"] == "Running"
    assert not any(b and "source" in b for b in daemons["h2"].bodies)  # never pulled
    assert "c1" not in daemons["h2"].instances


def test_a_migration_refused_after_the_stop_starts_the_container_again(
    daemons: dict[str, FakeLxd], agents: dict[str, Agent]
) -> None:
    src = daemons["h1"]
    src.faults.add("no-migration")
    doc = _move(agents)
    assert doc["state"] == "failed", doc["message"]
    assert (
        "migration of c1: POST /1.0/instances/c1: Failed to create migration source "
        in (doc["message"])
    )
    assert "started again here" in doc["message"]
    assert [b["action"] for b in src.bodies if b and "action" in b] == ["stop", "start"]
    assert src.instances["c1"]["status"] == "Running"
    assert "DELETE /1.0/instances/c1" not in src.seen


def test_the_agent_selects_the_backend_of_its_config(tmp_path: Path) -> None:
    lxd = parse({"backend": "lxd", "state_dir": str(tmp_path), "lxd": {"address": "h:8443"}})
    assert isinstance(make_backend(lxd), LxdBackend)
    lxc = parse({"state_dir": str(tmp_path), "lxc": {"lxcpath": str(tmp_path)}})
    assert isinstance(make_backend(lxc), LxcBackend)


def test_a_restore_failing_on_the_target_rolls_back_to_the_source(
    daemons: dict[str, FakeLxd], agents: dict[str, Agent]
) -> None:
    src, dst = daemons["h1"], daemons["h2"]
    dst.faults.add("restore-fails")
    doc = _move(agents)
    assert doc["state"] == "rolled_back", doc["message"]
    assert "stateful start of c1" in doc["message"] and "forkmigrate" in doc["message"]
    # the target's pulled copy is deleted; the source started its own from its state
    assert "DELETE /1.0/instances/c1" in dst.seen and "c1" not in dst.instances
    assert {"action": "start", "stateful": True} in src.bodies
    assert src.instances["c1"]["status"] == "Running"
    assert "DELETE /1.0/instances/c1" not in src.seen
    assert (
        "rolled back: restored on h1 (Running, init pid 4742, announced pid 4742"
        in (doc["message"])
    )


def test_a_pull_failing_mid_way_rolls_back_to_the_source(
    daemons: dict[str, FakeLxd], agents: dict[str, Agent]
) -> None:
    src, dst = daemons["h1"], daemons["h2"]
    dst.faults.add("pull-fails")
    doc = _move(agents)
    assert doc["state"] == "rolled_back", doc["message"]
    assert "pulling c1 from h1" in doc["message"]
    assert "Error transferring instance data" in doc["message"]
    assert "rolled back: restored on h1" in doc["message"]
    assert src.instances["c1"]["status"] == "Running" and "c1" not in dst.instances


def test_an_unknown_instance_is_refused_and_named(
    tmp_path: Path, daemons: dict[str, FakeLxd], agents: dict[str, Agent]
) -> None:
    doc = _move(agents, container="nosuch")
    assert doc["state"] == "failed"
    assert doc["message"] == "refused: container nosuch does not run on h1"
    assert not any(b and "action" in b for b in daemons["h1"].bodies)  # nothing stopped
    sock = str(daemons["h1"].server_address)
    backend = LxdBackend(parse({"backend": "lxd", "lxd": {"socket": sock,
                         "address": "10.0.0.1:8443"}}).lxd, "h1", tmp_path / "b")  # fmt: skip
    with pytest.raises(BackendError, match=f"LXD at {sock} has no instance nosuch"):
        backend.checkpoint("nosuch", tmp_path)


def test_a_missing_socket_is_named(tmp_path: Path, daemons: dict[str, FakeLxd]) -> None:
    gone = str(tmp_path / "nowhere" / "unix.socket")
    agent = lxd_agent(tmp_path, "h1", gone, "10.0.0.1:8443")
    try:
        s = step(agent.port, memory_bytes=2**28)
        post(agent.port, s)
        doc = wait_terminal(agent.port, s.step_id)
    finally:
        agent.stop()
    assert doc["state"] == "failed"
    assert doc["message"] == (
        f"refused: cannot see the containers of h1: GET /1.0/instances?recursion=1: no "
        f"LXD/Incus socket at {gone} (is the daemon running? lxd.socket in the migrator's "
        "config names it)"
    )


def test_a_restored_instance_with_another_mac_is_undone(
    daemons: dict[str, FakeLxd], agents: dict[str, Agent]
) -> None:
    src, dst = daemons["h1"], daemons["h2"]
    dst.faults.add("other-mac")
    doc = _move(agents)
    assert doc["state"] == "rolled_back", doc["message"]
    assert f"c1 after the restore: eth0 has MAC 00:16:3e:00:00:99, had {C1_MAC}" in doc["message"]
    assert "c1" not in dst.instances and "DELETE /1.0/instances/c1" in dst.seen
    assert src.instances["c1"]["status"] == "Running"


# -------------------------------------------------------------------- the parts


def test_size_from_limits() -> None:
    inst = recorded("instances-running")["metadata"][0]
    assert size_of(inst) == Size(1, 256 * 2**20)
    assert size_of({"config": {"limits.cpu": "0-3,6", "limits.memory": "2GB"}}) == Size(
        5, 2 * 10**9
    )
    assert size_of({"config": {"limits.memory": "50%"}}) == Size(1, 0)
    with pytest.raises(BackendError, match=r"limits\.memory '2 parsecs'"):
        size_of({"name": "x", "config": {"limits.memory": "2 parsecs"}})
    with pytest.raises(BackendError, match=r"instance x: limits\.cpu 'many'"):
        size_of({"name": "x", "config": {"limits.cpu": "many"}})


def test_config_kept_and_addresses_checked() -> None:
    inst = recorded("instance-running")["metadata"]
    cfg = {**inst["config"], "volatile.eth1.hwaddr": "00:16:3e:00:00:09"}
    assert "volatile.uuid" in cfg and "volatile.eth0.host_name" in cfg
    kept = kept_config(cfg)
    assert kept["volatile.eth1.hwaddr"] == "00:16:3e:00:00:09" and kept["limits.cpu"] == "1"
    assert not [k for k in kept if k.startswith("volatile.") and not k.endswith(".hwaddr")]
    state = recorded("state-running")["metadata"]
    t = Ticket(
        host="h1", instance="c1", operation="", secrets={}, certificate="", architecture="",
        config={}, devices={}, profiles=[], macs={"eth0": C1_MAC}, ipv4=["10.5.0.11"],
    )  # fmt: skip
    assert differences(t, state) == []
    moved = copy.deepcopy(state)
    moved["network"]["eth0"]["hwaddr"] = "00:16:3e:99:99:99"
    moved["network"]["eth0"]["addresses"] = []
    assert differences(t, moved) == [
        f"eth0 has MAC 00:16:3e:99:99:99, had {C1_MAC}",
        "address 10.5.0.11 missing",
    ]


def test_answers_parsed() -> None:
    raw = (ANSWERS / "error-404-instance.json").read_bytes()
    with pytest.raises(LxdError, match=r"GET /1.0/instances/x: Instance not found \(HTTP 404\)"):
        parse_answer("GET /1.0/instances/x", 404, raw)
    raw = (ANSWERS / "delete-running.json").read_bytes()
    with pytest.raises(LxdError, match=r"Instance is running \(HTTP 400\)"):
        parse_answer("DELETE /1.0/instances/c1", 400, raw)
    with pytest.raises(LxdError, match="HTTP 200, not JSON"):
        parse_answer("GET /1.0", 200, b"<html>")
    ans = parse_answer("PUT s", 202, (ANSWERS / "stop-stateful.json").read_bytes())
    assert ans.kind == "async" and ans.operation.startswith("/1.0/operations/")
    bad = json.dumps({"type": "async", "metadata": {}}).encode()
    with pytest.raises(LxdError, match="an async answer without its operation"):
        parse_answer("PUT s", 202, bad)


def test_config_of_the_lxd_backend() -> None:
    with pytest.raises(ConfigError) as err:
        parse({"backend": "lxd", "precopy_rounds": 2, "lxd": {"socket": "lxd.sock"}})
    msg = str(err.value)
    assert "lxd.address: required with backend lxd" in msg
    assert "precopy_rounds: the lxd backend has no pre-copy" in msg
    assert "lxd.socket: not an absolute path: 'lxd.sock'" in msg
    with pytest.raises(ConfigError, match=r"lxd\.address: HOST:PORT, got '10\.0\.0\.1'"):
        parse({"backend": "lxd", "lxd": {"address": "10.0.0.1"}})
    cfg = parse({"backend": "lxd", "lxd": {"address": "10.0.0.1:8443", "timeout_s": 30}})
    assert cfg.backend_timeout_s() == 30.0


def test_a_target_restarted_after_the_pull_still_deletes_its_copy(
    tmp_path: Path, daemons: dict[str, FakeLxd]
) -> None:
    """The backends called directly, as the step machine and the target agent do; the
    target's backend made again in between, as by an agent restart."""
    src, dst = daemons["h1"], daemons["h2"]

    def backend(host: str) -> LxdBackend:
        d = daemons[host]
        doc = {"backend": "lxd", "lxd": {"socket": str(d.server_address), "address": d.address}}
        return LxdBackend(parse(doc).lxd, host, tmp_path / host, announcer=lambda pid: "")

    out, into = tmp_path / "out", tmp_path / "in"
    out.mkdir()
    backend("h1").checkpoint("c1", out)
    assert src.instances["c1"]["status"] == "Stopped" and src.instances["c1"]["stateful"]
    into.mkdir()
    (into / "clavis-lxd-ticket.json").write_bytes((out / "clavis-lxd-ticket.json").read_bytes())
    backend("h2").restore("c1", into)
    assert backend("h2").running() == {"c1": Size(1, 256 * 2**20)}
    backend("h2").kill("c1")  # a new backend object: only the note on disk tells it
    assert "c1" not in dst.instances
    assert [x for x in dst.seen if x.startswith("PUT") or x.startswith("DELETE")] == [
        "PUT /1.0/instances/c1/state",  # the stateful start
        "PUT /1.0/instances/c1/state",  # the forced stop
        "DELETE /1.0/instances/c1",
    ]
    backend("h1").restore("c1", out)  # the source's rollback: its own stateful start
    assert src.instances["c1"]["status"] == "Running"
